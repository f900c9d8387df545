#include "loader/child_reads/probe.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <nlohmann/json.hpp>

#include "base/deadline.h"
#include "base/json_numbers.h"
#include "base/option_spelling.h"
#include "base/posix_error.h"
#include "base/progress_note.h"
#include "base/unique_fd.h"
#include "base/untrusted_json.h"
#include "formats/core/schema_json.h"
#include "formats/open_reader.h"
#include "formats/shard_set.h"
#include "formats/sharded_reader.h"
#include "loader/children/child_exit.h"
#include "loader/children/child_hygiene.h"
#include "loader/children/child_process.h"
#include "loader/children/program_image.h"
#include "loader/worker/reader_options_json.h"
#include "stoker/error.h"
#include "stoker/version.h"

namespace stoker::detail {
namespace {

using nlohmann::json;

// The probe's answer is small (a schema, a few numbers); anything larger is not one.
constexpr std::size_t kMaxAnswerBytes = 64u << 20;
// The request names the dataset: a shard set of 10 000 shards of long paths is a few MB.
constexpr std::size_t kMaxRequestBytes = 64u << 20;

// Samples read to find a bytes field's typical size, spread over the dataset; a few because a
// cold dataset costs a random read each.
constexpr std::uint64_t kTypicalProbes = 16;
// Fixed fields are read with them: no more than this of them in all.
constexpr std::uint64_t kMaxFixedProbeBytes = 256u << 20;

std::uint64_t dataset_file_bytes(const std::string& path) {
  if (formats::is_shard_set(path)) {
    std::uint64_t total = 0;
    for (const std::string& shard : formats::shard_paths(path)) {
      total += dataset_file_bytes(shard);
      note_progress();  // a stat of each shard: thousands on a slow file system take their time
    }
    return total;
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return 0;
  if (S_ISDIR(st.st_mode)) {
    if (::stat((path + "/data.mdb").c_str(), &st) != 0) return 0;
  }
  return static_cast<std::uint64_t>(st.st_size);
}

// "JPEG" or "PNG" for bytes that begin with that format's signature, else "".
std::string image_signature(std::span<const std::byte> b) {
  const auto starts = [&](std::initializer_list<unsigned char> sig) {
    if (b.size() < sig.size()) return false;
    std::size_t k = 0;
    for (const unsigned char c : sig) {
      if (std::to_integer<unsigned char>(b[k++]) != c) return false;
    }
    return true;
  };
  if (starts({0xFF, 0xD8, 0xFF})) return "JPEG";
  if (starts({0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A})) return "PNG";
  return "";
}

// The largest sample of each bytes field among a few spread over the dataset (of those that can
// be read), and what the first one read holds (ProbeResult::encoded).
std::vector<std::uint64_t> typical_sizes(formats::Reader& reader, std::vector<std::string>& encoded) {
  const Schema& schema = reader.schema();
  std::vector<std::uint64_t> typical(schema.fields.size(), 0);
  encoded.assign(schema.fields.size(), "");
  std::vector<bool> looked(schema.fields.size(), false);
  if (std::none_of(schema.fields.begin(), schema.fields.end(), [](const Field& f) { return f.is_bytes(); })) {
    return typical;
  }
  const std::uint64_t fixed = std::max<std::uint64_t>(schema.bytes_per_sample(), 1);
  const std::uint64_t n = schema.num_samples;
  const std::uint64_t probes = std::min({n, kTypicalProbes, std::max<std::uint64_t>(kMaxFixedProbeBytes / fixed, 1)});
  std::vector<std::byte> scratch(schema.bytes_per_sample());
  std::vector<formats::VarBytes> bytes(schema.fields.size());
  std::vector<formats::FieldOut> out(schema.fields.size());
  for (std::uint64_t p = 0; p < probes; ++p) {
    const std::uint64_t index = probes == 1 ? 0 : p * (n - 1) / (probes - 1);
    std::size_t offset = 0;
    for (std::size_t f = 0; f < schema.fields.size(); ++f) {
      if (schema.fields[f].is_bytes()) {
        bytes[f].clear();
        out[f] = formats::FieldOut{nullptr, &bytes[f]};
      } else {
        out[f] = formats::FieldOut{scratch.data() + offset, nullptr};
        offset += schema.fields[f].bytes_per_sample();
      }
    }
    try {
      reader.read(std::span<const std::uint64_t>(&index, 1), out);
      note_progress();
    } catch (const Error&) {
      continue;  // a sample that cannot be read fails its batch, when its turn comes, not the loader
    }
    for (std::size_t f = 0; f < schema.fields.size(); ++f) {
      if (!schema.fields[f].is_bytes()) continue;
      typical[f] = std::max<std::uint64_t>(typical[f], bytes[f].total());
      if (!looked[f] && bytes[f].samples() > 0) {
        encoded[f] = image_signature(bytes[f].sample(0));
        looked[f] = true;
      }
    }
  }
  return typical;
}

std::string request_json(const std::string& path, const formats::ReaderOptions& options) {
  json j = {{"stoker_version", std::string(version())}, {"option_spelling", static_cast<int>(option_spelling())}};
  put_reader_options(j, path, options);
  return j.dump();
}

// Writes all of `text`; false when the other end is gone.
bool write_all(int fd, std::string_view text) noexcept {
  while (!text.empty()) {
    const ssize_t n = ::send(fd, text.data(), text.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    text.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

// Reads until the other end closes, at most `limit` bytes, until `deadline`: nullopt when the
// deadline passed.
std::optional<std::string> read_all(int fd, std::size_t limit, Clock::time_point deadline) {
  std::string text;
  char buf[65536];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const int r = poll_until(&p, 1, deadline);
    if (r < 0) throw_errno("poll for the probe's answer");
    if (r == 0) return std::nullopt;
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return text;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > limit) return text;  // not an answer: the parse says so
  }
}

// The child's progress notes: one byte on the socket, at most one per 100 ms (a scan of millions
// of keys notes each), before the answer.
int g_note_sock = -1;
Clock::time_point g_last_note{};

void send_note() noexcept {
  const Clock::time_point now = Clock::now();
  if (now - g_last_note < std::chrono::milliseconds(100)) return;
  g_last_note = now;
  const char note = kProgressNote;
  (void)!::send(g_note_sock, &note, 1, MSG_NOSIGNAL);
}

// The child's part: opens the dataset, describes it, answers on `sock`. Never returns.
[[noreturn]] void answer(int sock, const std::string& request) noexcept {
  std::string text;
  std::string path = "the dataset";
  g_note_sock = sock;
  set_progress_sink(send_note);
  send_note();  // started: an exec'd probe has run up to its main() and read the request
  try {
    const json j = parse_untrusted_json(request, JsonLimits{kMaxRequestBytes, 32});
    const formats::ReaderOptions options = get_reader_options(j, path);
    const auto spelling = json_integer<int>(j.at("option_spelling"));
    if (spelling && *spelling >= 0 && *spelling <= static_cast<int>(OptionSpelling::python)) {
      set_option_spelling(static_cast<OptionSpelling>(*spelling));
    }
    if (j.at("stoker_version").get<std::string>() != version()) {
      throw Error(ErrorCode::internal, fmt::format("stoker: the loader is stoker {} and its probe stoker {}: the two "
                                                   "must be the same build",
                                                   j.at("stoker_version").get<std::string>(), version()));
    }
    auto reader = formats::open_reader(path, options);
    note_progress();
    text = json{{"result", json::parse(probe_result_to_json(describe_dataset(*reader, path)))}}.dump(
        -1, ' ', false, json::error_handler_t::replace);
  } catch (const Error& e) {
    text = json{{"error", {{"code", static_cast<int>(e.code())}, {"message", e.what()}}}}.dump(
        -1, ' ', false, json::error_handler_t::replace);
  } catch (const std::bad_alloc&) {
    text = json{{"error",
                 {{"code", static_cast<int>(ErrorCode::dataset)},
                  {"message", formats::source_name(path) +
                                  ": reading its metadata ran out of memory: the file claims more than this "
                                  "machine holds (damaged, or made to)"}}}}
               .dump(-1, ' ', false, json::error_handler_t::replace);
  } catch (const std::exception& e) {
    text = json{{"error", {{"code", static_cast<int>(ErrorCode::internal)}, {"message", e.what()}}}}.dump(
        -1, ' ', false, json::error_handler_t::replace);
  }
  set_progress_sink(nullptr);  // nothing but the answer from here
  (void)write_all(sock, text);
  ::_exit(0);
}

struct Child {
  ChildProcess process;
  bool exec = false;  // an exec'd probe reads the request from the socket; a forked one has it
  std::string program;
};

// Starts the probe process: an exec of the program image when there is one, else a fork.
Child start_child(const std::string& request) {
  std::optional<ProgramImage> image = fork_server_image();
  std::optional<ExecImage> exec;
  if (image) exec.emplace(image->path, image->argv, kProbeEnv);
  ChildProcess process("the probe that reads the dataset's metadata", SOCK_STREAM, ChildProcess::Tie::to_this_thread,
                       [&](int sock) {
                         if (exec) {
                           exec->exec(sock);
                           ::_exit(static_cast<int>(ChildExit::exec_failed));
                         }
                         answer(sock, request);  // ends with _exit
                       });
  return Child{std::move(process), image.has_value(), image ? image->path : std::string()};
}

// "300 ms", "10 s", "2.5 s".
std::string show_duration(std::chrono::milliseconds d) {
  if (d < std::chrono::seconds(1)) return fmt::format("{} ms", d.count());
  if (d.count() % 1000 == 0) return fmt::format("{} s", d.count() / 1000);
  return fmt::format("{:.1f} s", static_cast<double>(d.count()) / 1000);
}

Error probe_failure(const std::string& source, const Child& child, int status, const std::string& what) {
  const std::string path = formats::source_name(source);
  // A program started by exec that exits without a word may be one that never calls stoker::init.
  if (child.exec && WIFEXITED(status)) {
    const bool self = child.program == "/proc/self/exe";
    return Error(ErrorCode::io,
                 fmt::format("{}: the process that reads its metadata {} without an answer; it is {}, whose main() "
                             "must call stoker::init(argc, argv) before anything else (stoker/init.h{})",
                             path, what, self ? "this program started again" : "the worker executable " + child.program,
                             self ? "" : "; the installed stoker-worker does"));
  }
  return Error(ErrorCode::dataset,
               fmt::format("{}: the process that read its metadata {} (it was read in a process of its own, so the "
                           "training process is unharmed): the file is damaged, or not one HDF5 or LMDB can read",
                           path, what));
}

}  // namespace

std::chrono::milliseconds probe_stall_limit(std::chrono::milliseconds timeout) noexcept {
  if (timeout.count() <= 0) return std::chrono::milliseconds(0);
  return std::min(timeout, kProbeStallLimit);
}

ProbeRead read_probe_answer(int fd, std::size_t limit, std::chrono::milliseconds stall_limit,
                            const std::function<bool()>& keep_going, std::string& text) {
  constexpr std::chrono::milliseconds kCheckEvery{100};
  text.clear();
  char buf[65536];
  Clock::time_point last_byte = Clock::now(), last_check = last_byte;
  for (;;) {
    const Clock::time_point stall_at = stall_limit.count() > 0 ? last_byte + stall_limit : Clock::time_point::max();
    const Clock::time_point wake = keep_going ? std::min(stall_at, last_check + kCheckEvery) : stall_at;
    pollfd p{fd, POLLIN, 0};
    const int r = poll_until(&p, 1, wake);
    if (r < 0) throw_errno("poll for the probe's answer");
    const Clock::time_point now = Clock::now();
    if (keep_going && now >= last_check + kCheckEvery) {
      last_check = now;
      if (!keep_going()) return ProbeRead::stopped;
    }
    if (r == 0) {
      if (now >= stall_at) return ProbeRead::stalled;
      continue;
    }
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return ProbeRead::answered;
    last_byte = now;  // any byte is a sign of life, a note or the answer
    std::string_view got(buf, static_cast<std::size_t>(n));
    if (text.empty()) got.remove_prefix(std::min(got.size(), got.find_first_not_of(kProgressNote)));
    text.append(got);
    if (text.size() > limit) return ProbeRead::answered;  // not an answer: the parse says so
  }
}

ProbeResult describe_dataset(formats::Reader& reader, const std::string& path) {
  ProbeResult r;
  r.schema = reader.schema();
  r.layout = reader.describe_layout();
  r.bounds.resize(r.schema.fields.size());
  for (std::size_t f = 0; f < r.schema.fields.size(); ++f) {
    if (r.schema.fields[f].is_bytes()) r.bounds[f] = reader.sample_bound(f);
    note_progress();
  }
  r.typical = typical_sizes(reader, r.encoded);
  r.locality_rows = reader.locality_rows();
  r.file_bytes = dataset_file_bytes(path);
  r.version = reader.version();
  if (const auto* sharded = dynamic_cast<const formats::ShardedReader*>(&reader)) {
    r.shard_samples = sharded->shard_samples();
    r.shard_identities = sharded->shard_identities();
  }
  try {
    r.metadata = reader.metadata();
  } catch (const Error& e) {  // the samples do not depend on it: a warning, not a failure
    r.metadata_error = e.what();
  }
  return r;
}

std::string probe_result_to_json(const ProbeResult& r) {
  json bounds = json::array();
  for (const formats::SampleBound& b : r.bounds) bounds.push_back({b.bytes, b.exact});
  return json{{"schema", formats::schema_to_json(formats::StoredSchema{r.schema, true, std::nullopt, {}})},
              {"layout", r.layout},
              {"bounds", bounds},
              {"typical", r.typical},
              {"encoded", r.encoded},
              {"locality_rows", r.locality_rows},
              {"file_bytes", r.file_bytes},
              {"version", r.version},
              {"shard_samples", r.shard_samples},
              {"shard_identities", identities_to_json(r.shard_identities)},
              {"metadata", r.metadata},
              {"metadata_error", r.metadata_error}}
      .dump(-1, ' ', false, json::error_handler_t::replace);  // a path in the layout need not be UTF-8
}

ProbeResult probe_result_from_json(const std::string& text) {
  try {
    const json j = parse_untrusted_json(text, JsonLimits{kMaxAnswerBytes, 8});
    ProbeResult r;
    r.schema = formats::schema_from_json(j.at("schema").get<std::string>(), "the probe's answer").schema;
    r.layout = j.at("layout").get<std::string>();
    for (const json& b : j.at("bounds")) r.bounds.push_back({b.at(0).get<std::uint64_t>(), b.at(1).get<bool>()});
    r.typical = j.at("typical").get<std::vector<std::uint64_t>>();
    r.encoded = j.at("encoded").get<std::vector<std::string>>();
    r.locality_rows = j.at("locality_rows").get<std::uint64_t>();
    r.file_bytes = j.at("file_bytes").get<std::uint64_t>();
    r.version = j.at("version").get<std::uint64_t>();
    r.shard_samples = j.at("shard_samples").get<std::vector<std::uint64_t>>();
    r.shard_identities = identities_from_json(j.at("shard_identities"));
    r.metadata = j.at("metadata").get<std::map<std::string, std::string>>();
    r.metadata_error = j.at("metadata_error").get<std::string>();
    if (r.bounds.size() != r.schema.fields.size() || r.typical.size() != r.schema.fields.size() ||
        r.encoded.size() != r.schema.fields.size()) {
      throw Error(ErrorCode::internal, "stoker: the probe's answer does not match its schema");
    }
    return r;
  } catch (const json::exception& e) {
    throw Error(ErrorCode::internal, fmt::format("stoker: malformed answer from the probe: {}", e.what()));
  }
}

ProbeResult probe_dataset(const std::string& path, const formats::ReaderOptions& options,
                          std::chrono::milliseconds timeout, const std::function<bool()>& keep_going) {
  const std::string request = request_json(path, options);
  Child child = start_child(request);
  if (child.exec && !write_all(child.process.socket(), request)) {
    const int status = child.process.wait();
    throw probe_failure(path, child, status, describe_wait_status(status));
  }
  ::shutdown(child.process.socket(), SHUT_WR);
  const std::chrono::milliseconds stall_limit = probe_stall_limit(timeout);
  std::string text;
  const ProbeRead read = read_probe_answer(child.process.socket(), kMaxAnswerBytes, stall_limit, keep_going, text);
  if (read == ProbeRead::stopped) {
    child.process.kill_and_wait();
    throw Error(ErrorCode::interrupted,
                fmt::format("{}: building the loader was interrupted while its metadata was read (the process "
                            "reading it was ended)",
                            formats::source_name(path)));
  }
  if (read == ProbeRead::stalled) {
    child.process.kill_and_wait();
    const std::string why =
        stall_limit < kProbeStallLimit
            ? fmt::format("raise {} if the file is only slow to read", option_name("timeout"))
            : fmt::format(
                  "each step of reading it (the file opened, a shard, a sample) may take up to that: the file "
                  "is damaged, or its storage does not answer ({} = 0 waits for it without a limit, for "
                  "workers too)",
                  option_name("timeout"));
    throw probe_failure(path, child, child.process.status(),
                        fmt::format("made no progress for {} and was killed (HDF5 loops forever on some damaged "
                                    "files; {})",
                                    show_duration(stall_limit), why));
  }
  if (text.size() > kMaxAnswerBytes) {  // the child may be blocked sending the rest: end it
    child.process.kill_and_wait();
    throw Error(ErrorCode::internal, fmt::format("stoker: the probe's answer for {} passed {} bytes",
                                                 formats::source_name(path), kMaxAnswerBytes));
  }
  const int status = child.process.wait();
  if (text.empty()) throw probe_failure(path, child, status, describe_wait_status(status));
  const json j = [&] {
    try {
      return parse_untrusted_json(text, JsonLimits{kMaxAnswerBytes, 16});
    } catch (const json::exception& e) {
      throw Error(ErrorCode::internal, fmt::format("stoker: malformed answer from the probe: {}", e.what()));
    }
  }();
  if (j.contains("error")) {
    const auto code = json_integer<int>(j["error"].value("code", json(0)));
    const std::string message = j["error"].value("message", std::string("(no message)"));
    throw Error(error_code_from_wire(static_cast<std::uint64_t>(code.value_or(0))), message);
  }
  if (!j.contains("result")) throw Error(ErrorCode::internal, "stoker: the probe's answer holds no result");
  return probe_result_from_json(j["result"].dump());
}

[[noreturn]] void serve_probe(int sock) {
  std::optional<std::string> request;
  try {
    request = read_all(sock, kMaxRequestBytes, Clock::time_point::max());
  } catch (...) {
    ::_exit(static_cast<int>(ChildExit::setup_failed));
  }
  answer(sock, request ? *request : std::string());
}

}  // namespace stoker::detail
