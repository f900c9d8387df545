#include "formats/hdf5/hdf5_write_driver.h"

#include <H5FDpublic.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#if H5_VERSION_GE(1, 13, 2)
#include <H5FDdevelop.h>  // the driver class moved here, with a version and a value of its own
#endif

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <new>
#include <utility>
#include <vector>

#include "stoker/error.h"

namespace stoker::formats {
namespace {

constexpr haddr_t kMaxAddr = static_cast<haddr_t>(std::numeric_limits<off_t>::max());

struct Info {
  WriteStatus* status = nullptr;
};

// A file as the driver has it; `pub` first, as HDF5 hands it back as an H5FD_t*.
struct File {
  H5FD_t pub;
  int fd = -1;
  dev_t device = 0;
  ino_t inode = 0;
  haddr_t eoa = 0, eof = 0;
  WriteStatus* status = nullptr;
  bool failed = false;
  // Since a failure, every write, in order: reads see them over the file's contents.
  std::vector<std::pair<haddr_t, std::vector<unsigned char>>>* kept = nullptr;
};

File* of(H5FD_t* f) { return reinterpret_cast<File*>(f); }
const File* of(const H5FD_t* f) { return reinterpret_cast<const File*>(f); }

void fail(File* f, int err) {
  if (f->failed) return;
  f->failed = true;
  if (f->status && f->status->error == 0) f->status->error = err;
}

H5FD_t* open_file(const char* name, unsigned flags, hid_t fapl, haddr_t maxaddr) {
  if (!name || !*name || maxaddr == 0 || maxaddr == HADDR_UNDEF || maxaddr > kMaxAddr) return nullptr;
  int o = O_CLOEXEC | ((flags & H5F_ACC_RDWR) ? O_RDWR : O_RDONLY);
  if (flags & H5F_ACC_TRUNC) o |= O_TRUNC;
  if (flags & H5F_ACC_CREAT) o |= O_CREAT;
  if (flags & H5F_ACC_EXCL) o |= O_EXCL;
  const int fd = ::open(name, o, 0666);
  if (fd < 0) return nullptr;
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return nullptr;
  }
  auto* f = new (std::nothrow) File{};
  auto* kept = new (std::nothrow) std::vector<std::pair<haddr_t, std::vector<unsigned char>>>;
  if (!f || !kept) {
    delete f;
    delete kept;
    ::close(fd);
    return nullptr;
  }
  f->fd = fd;
  f->device = st.st_dev;
  f->inode = st.st_ino;
  f->eof = static_cast<haddr_t>(st.st_size);
  f->kept = kept;
  if (const auto* info = static_cast<const Info*>(H5Pget_driver_info(fapl))) f->status = info->status;
  return &f->pub;
}

herr_t close_file(H5FD_t* file) {
  File* f = of(file);
  const int rc = ::close(f->fd);
  delete f->kept;
  delete f;
  return rc == 0 ? 0 : -1;
}

int compare(const H5FD_t* a, const H5FD_t* b) {
  const File *x = of(a), *y = of(b);
  if (x->device != y->device) return x->device < y->device ? -1 : 1;
  if (x->inode != y->inode) return x->inode < y->inode ? -1 : 1;
  return 0;
}

herr_t query(const H5FD_t*, unsigned long* flags) {
  if (flags)
    *flags = H5FD_FEAT_AGGREGATE_METADATA | H5FD_FEAT_ACCUMULATE_METADATA | H5FD_FEAT_DATA_SIEVE |
             H5FD_FEAT_AGGREGATE_SMALLDATA;
  return 0;
}

haddr_t get_eoa(const H5FD_t* file, H5FD_mem_t) { return of(file)->eoa; }
herr_t set_eoa(H5FD_t* file, H5FD_mem_t, haddr_t addr) {
  if (addr > kMaxAddr) return -1;
  of(file)->eoa = addr;
  return 0;
}
haddr_t get_eof(const H5FD_t* file, H5FD_mem_t) { return of(file)->eof; }

herr_t get_handle(H5FD_t* file, hid_t, void** handle) {
  if (!handle) return -1;
  *handle = &of(file)->fd;
  return 0;
}

bool in_range(const File* f, haddr_t addr, std::size_t size) {
  return addr != HADDR_UNDEF && size <= kMaxAddr && addr <= kMaxAddr - size && addr + size <= f->eoa;
}

herr_t read_at(H5FD_t* file, H5FD_mem_t, hid_t, haddr_t addr, std::size_t size, void* buffer) {
  File* f = of(file);
  if (!in_range(f, addr, size)) return -1;
  auto* out = static_cast<unsigned char*>(buffer);
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(f->fd, out + done, size - done, static_cast<off_t>(addr + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) break;  // past the end of the file: zeros, as HDF5 expects
    done += static_cast<std::size_t>(n);
  }
  std::memset(out + done, 0, size - done);
  for (const auto& [at, bytes] : *f->kept) {
    const haddr_t from = std::max(at, addr), to = std::min<haddr_t>(at + bytes.size(), addr + size);
    if (from < to) std::memcpy(out + (from - addr), bytes.data() + (from - at), to - from);
  }
  return 0;
}

herr_t write_at(H5FD_t* file, H5FD_mem_t, hid_t, haddr_t addr, std::size_t size, const void* buffer) {
  File* f = of(file);
  if (!in_range(f, addr, size)) return -1;
  const auto* in = static_cast<const unsigned char*>(buffer);
  for (std::size_t done = 0; !f->failed && done < size;) {
    const ssize_t n = ::pwrite(f->fd, in + done, size - done, static_cast<off_t>(addr + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      fail(f, n < 0 ? errno : EIO);
      break;
    }
    done += static_cast<std::size_t>(n);
  }
  if (f->failed) {
    try {
      f->kept->emplace_back(addr, std::vector<unsigned char>(in, in + size));
    } catch (const std::bad_alloc&) {
      return -1;  // out of memory as well: HDF5's error, past which the writer cannot go
    }
  }
  f->eof = std::max<haddr_t>(f->eof, addr + size);
  return 0;
}

herr_t truncate_to_eoa(H5FD_t* file, hid_t, hbool_t) {
  File* f = of(file);
  if (f->eoa == f->eof) return 0;
  if (!f->failed && ::ftruncate(f->fd, static_cast<off_t>(f->eoa)) != 0) fail(f, errno);
  f->eof = f->eoa;
  return 0;
}

H5FD_class_t make_class() {
  H5FD_class_t c{};
#if H5_VERSION_GE(1, 13, 2)
  c.version = H5FD_CLASS_VERSION;
  c.value = static_cast<H5FD_class_value_t>(400);  // in the range HDF5 leaves to drivers of one program
#endif
  c.name = "stoker_write";
  c.maxaddr = kMaxAddr;
  c.fc_degree = H5F_CLOSE_WEAK;
  c.fapl_size = sizeof(Info);
  c.open = open_file;
  c.close = close_file;
  c.cmp = compare;
  c.query = query;
  c.get_eoa = get_eoa;
  c.set_eoa = set_eoa;
  c.get_eof = get_eof;
  c.get_handle = get_handle;
  c.read = read_at;
  c.write = write_at;
  c.truncate = truncate_to_eoa;
  const H5FD_mem_t map[] = H5FD_FLMAP_DICHOTOMY;
  std::copy(std::begin(map), std::end(map), c.fl_map);
  return c;
}

}  // namespace

void use_write_driver(hid_t fapl, WriteStatus* status) {
  static const H5FD_class_t cls = make_class();
  // Registered once; HDF5 keeps its own copy of the class.
  static const hid_t driver = H5FDregister(&cls);
  const Info info{status};
  if (driver < 0 || H5Pset_driver(fapl, driver, &info) < 0)
    throw Error(ErrorCode::internal, "hdf5 writer: the file driver cannot be set up");
}

}  // namespace stoker::formats
