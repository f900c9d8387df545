#include "tests/support/test_data.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "formats/lmdb/lmdb_writer.h"
#include "stoker/digest.h"
#include "stoker/error.h"

namespace stoker::test {
namespace {

std::uint64_t salt(const std::string& name) {
  std::uint64_t h = 1469598103934665603ULL;
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  return h;
}

template <class T>
void put(std::vector<std::byte>& out, std::size_t e, T v) {
  std::memcpy(out.data() + e * sizeof(T), &v, sizeof(T));
}

}  // namespace

std::vector<std::byte> expected_field(const Field& field, std::uint64_t index) {
  const std::size_t n = field.elements_per_sample();
  std::vector<std::byte> out(field.bytes_per_sample());
  const std::uint64_t s = salt(field.name);
  for (std::size_t e = 0; e < n; ++e) {
    std::uint64_t v = (index * 1000003ULL + e * 7919ULL + s) ^ (index >> 3);
    switch (field.dtype) {
      case DType::u8: put(out, e, static_cast<std::uint8_t>(v)); break;
      case DType::i8: put(out, e, static_cast<std::int8_t>(v)); break;
      case DType::u16: put(out, e, static_cast<std::uint16_t>(v)); break;
      case DType::i16: put(out, e, static_cast<std::int16_t>(v)); break;
      case DType::i32: put(out, e, static_cast<std::int32_t>(v)); break;
      case DType::i64: put(out, e, static_cast<std::int64_t>(v * 0x9e3779b97f4a7c15ULL)); break;
      case DType::f16: put(out, e, static_cast<std::uint16_t>(0x3c00 + v % 1024)); break;  // finite, in [1, 2)
      case DType::f32: put(out, e, static_cast<float>(v % 100003) * 0.25f); break;
      case DType::f64: put(out, e, static_cast<double>(v % 1000003) * 0.125); break;
      case DType::b8: put(out, e, static_cast<std::uint8_t>(v & 1)); break;
      case DType::u32: put(out, e, static_cast<std::uint32_t>(v * 2654435761u)); break;
      case DType::u64: put(out, e, static_cast<std::uint64_t>(v * 0xbf58476d1ce4e5b9ULL)); break;
      case DType::bf16: put(out, e, static_cast<std::uint16_t>(0x3f80 + v % 128)); break;  // finite, in [1, 2)
    }
  }
  return out;
}

std::vector<std::byte> expected_sample(const Schema& schema, std::uint64_t index) {
  std::vector<std::byte> out;
  for (const auto& f : schema.fields) {
    auto b = expected_field(f, index);
    out.insert(out.end(), b.begin(), b.end());
  }
  return out;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

Caught caught(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return {e.code(), e.what()};
  }
  return {ErrorCode::internal, "no error"};
}

void expect_error(ErrorCode code, const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one of code " << error_code_name(code);
  } catch (const Error& e) {
    EXPECT_EQ(error_code_name(e.code()), error_code_name(code)) << e.what();
    for (const auto& p : parts) {
      EXPECT_NE(std::string_view(e.what()).find(p), std::string_view::npos) << "'" << p << "' not in: " << e.what();
    }
  }
}

Schema small_schema(std::uint64_t n) {
  Schema s;
  s.num_samples = n;
  s.fields = {{"image", FieldKind::fixed, DType::u8, {3, 4, 5}},
              {"label", FieldKind::fixed, DType::i64, {}},
              {"weight", FieldKind::fixed, DType::f32, {2}}};
  return s;
}

Schema all_dtypes_schema(std::uint64_t n) {
  Schema s;
  s.num_samples = n;
  s.fields = {{"a_u8", FieldKind::fixed, DType::u8, {7}},      {"b_i8", FieldKind::fixed, DType::i8, {2, 3}},
              {"c_u16", FieldKind::fixed, DType::u16, {5}},    {"d_i16", FieldKind::fixed, DType::i16, {}},
              {"e_i32", FieldKind::fixed, DType::i32, {3, 1}}, {"f_i64", FieldKind::fixed, DType::i64, {2}},
              {"g_f16", FieldKind::fixed, DType::f16, {4}},    {"h_f32", FieldKind::fixed, DType::f32, {2, 2, 2}},
              {"i_f64", FieldKind::fixed, DType::f64, {3}},    {"j_bool", FieldKind::fixed, DType::b8, {3}},
              {"k_u32", FieldKind::fixed, DType::u32, {2}},    {"l_u64", FieldKind::fixed, DType::u64, {}},
              {"m_bf16", FieldKind::fixed, DType::bf16, {2}}};
  return s;
}

void write_hdf5(const std::string& path, const Schema& schema, const formats::Hdf5WriteOptions& options) {
  formats::Hdf5Writer w(path, schema, options);
  for (std::size_t f = 0; f < schema.fields.size(); ++f) {
    std::vector<std::byte> all;
    for (std::uint64_t i = 0; i < schema.num_samples; ++i) {
      auto b = expected_field(schema.fields[f], i);
      all.insert(all.end(), b.begin(), b.end());
    }
    w.write(f, 0, schema.num_samples, all.data());
  }
  w.close();
}

void write_lmdb(const std::string& path, const Schema& schema) {
  formats::LmdbWriteOptions o;
  o.commit_records = 97;  // several transactions even for small tests
  formats::LmdbWriter w(path, schema, o);
  ContentDigest digest;
  for (std::uint64_t i = 0; i < schema.num_samples; ++i) {
    auto rec = expected_sample(schema, i);
    digest.add(i, rec);
    w.append(rec.data());
  }
  w.finish(digest.hex());
}

TempDir::TempDir() {
  std::random_device rd;
  dir_ = std::filesystem::temp_directory_path() /
         ("stoker-test-" + std::to_string(::getpid()) + "-" + std::to_string(rd()));
  std::filesystem::create_directories(dir_);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::vector<std::string> shm_entries_of(int pid) {
  std::vector<std::string> out;
  std::string prefix = "stoker-" + std::to_string(pid) + "-";
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) {
    std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0) out.push_back(name);
  }
  return out;
}

std::vector<int> descendants() {
  std::map<int, int> parent;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    std::string name = e.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string line = proc_stat(std::stoi(name));
    if (line.empty()) continue;
    // pid (comm) state ppid ...: comm may hold spaces, so parse after the last ')'.
    auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state;
    int ppid;
    rest >> state >> ppid;
    parent[std::stoi(name)] = ppid;
  }
  std::vector<int> out;
  const int self = ::getpid();
  for (auto [pid, ppid] : parent) {
    for (int p = ppid, hops = 0; p > 1 && hops < 64; ++hops) {
      if (p == self) {
        out.push_back(pid);
        break;
      }
      auto it = parent.find(p);
      if (it == parent.end()) break;
      p = it->second;
    }
  }
  return out;
}

H5Builder::H5Builder(const std::string& path)
    : file_(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT)) {
  if (file_ < 0) throw Error(path + ": H5Fcreate failed (is the file open?)");
}

H5Builder::~H5Builder() { H5Fclose(file_); }

void H5Builder::group(const std::string& name) {
  H5Gclose(H5Gcreate2(file_, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
}

void H5Builder::text_attribute(const std::string& where, const std::string& name, const std::string& value, Text form,
                               std::size_t padding) {
  const hid_t type = H5Tcopy(H5T_C_S1);
  if (form != Text::fixed) {
    H5Tset_size(type, H5T_VARIABLE);
    H5Tset_cset(type, H5T_CSET_UTF8);
  } else {
    H5Tset_size(type, value.size() + padding);
    H5Tset_strpad(type, H5T_STR_NULLPAD);
  }
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t object = H5Oopen(file_, where.c_str(), H5P_DEFAULT);
  const hid_t a = H5Acreate2(object, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT);
  herr_t written;
  if (form != Text::fixed) {
    const char* text = form == Text::null ? nullptr : value.c_str();
    written = H5Awrite(a, type, &text);
  } else {
    std::string padded = value;
    padded.resize(value.size() + padding, '\0');
    written = H5Awrite(a, type, padded.data());
  }
  H5Aclose(a);
  H5Oclose(object);
  H5Sclose(space);
  H5Tclose(type);
  if (written < 0) throw Error("attribute " + name + " of " + where + ": H5Awrite failed");
}

void H5Builder::number_attribute(const std::string& where, const std::string& name, std::int64_t value) {
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t object = H5Oopen(file_, where.c_str(), H5P_DEFAULT);
  const hid_t a = H5Acreate2(object, name.c_str(), H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
  const herr_t written = H5Awrite(a, H5T_NATIVE_INT64, &value);
  H5Aclose(a);
  H5Oclose(object);
  H5Sclose(space);
  if (written < 0) throw Error("attribute " + name + " of " + where + ": H5Awrite failed");
}

void H5Builder::vlen(const std::string& name, const std::vector<std::vector<std::byte>>& samples, std::int64_t base) {
  const hid_t element = base < 0 ? H5T_NATIVE_UINT8 : static_cast<hid_t>(base);
  const hid_t type = H5Tvlen_create(element);
  const hsize_t n = samples.size();
  const hid_t space = H5Screate_simple(1, &n, nullptr);
  const hid_t d = H5Dcreate2(file_, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  std::vector<hvl_t> v(samples.size());
  for (std::size_t i = 0; i < samples.size(); ++i) {
    v[i].len = samples[i].size() / H5Tget_size(element);
    v[i].p = const_cast<std::byte*>(samples[i].data());
  }
  const herr_t rc = H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
  H5Dclose(d);
  H5Sclose(space);
  H5Tclose(type);
  if (rc < 0) throw Error(name + ": H5Dwrite failed");
}

void H5Builder::array(const std::string& name, std::int64_t type, std::vector<std::uint64_t> dims, const void* data) {
  std::vector<hsize_t> h(dims.begin(), dims.end());
  const hid_t space = H5Screate_simple(static_cast<int>(h.size()), h.data(), nullptr);
  const hid_t d =
      H5Dcreate2(file_, name.c_str(), static_cast<hid_t>(type), space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  const herr_t rc = H5Dwrite(d, static_cast<hid_t>(type), H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
  H5Dclose(d);
  H5Sclose(space);
  if (rc < 0) throw Error(name + ": H5Dwrite failed");
}

void H5Builder::members(const std::string& group_name, const std::vector<std::vector<std::byte>>& samples) {
  group(group_name);
  for (std::size_t i = 0; i < samples.size(); ++i) {
    array(group_name + "/" + std::to_string(i), H5T_NATIVE_UINT8, {samples[i].size()}, samples[i].data());
  }
}

void H5Builder::unwritten(const std::string& name, std::uint64_t elements) {
  const hsize_t n = elements;
  const hid_t space = H5Screate_simple(1, &n, nullptr);
  const hid_t d = H5Dcreate2(file_, name.c_str(), H5T_NATIVE_UINT8, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Sclose(space);
  if (d < 0) throw Error(name + ": H5Dcreate2 failed");
  H5Dclose(d);
}

std::string proc_stat(int pid) {
  // getline, not a streambuf iterator: a process that ends between open and read makes the read
  // fail (ESRCH), which the iterator would throw and getline turns into a failed stream.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return {};
  return line;
}

char state_of(int pid) {
  const std::string text = proc_stat(pid);
  const auto paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() ? text[paren + 2] : '\0';
}

int parent_of(int pid) {
  const std::string text = proc_stat(pid);
  const auto paren = text.rfind(')');
  if (paren == std::string::npos) return 0;
  std::istringstream rest(text.substr(paren + 2));
  char state;
  int ppid = 0;
  rest >> state >> ppid;
  return ppid;
}

}  // namespace stoker::test
