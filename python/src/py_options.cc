#include "py_options.h"

#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <cmath>
#include <optional>
#include <utility>

#include "binding.h"
#include "stoker/error.h"
#include "stoker/option_values.h"

namespace stoker_py {

[[noreturn]] void bad(const std::string& name, const std::string& value, const std::string& allowed) {
  throw stoker::Error(stoker::ErrorCode::invalid_option,
                      "stoker: " + name + "='" + stoker::printable(value) + "' is not one of " + allowed);
}

nb::object& warning_type() {
  static nb::object* t = new nb::object();  // never destroyed: outlives the interpreter's teardown
  return *t;
}

stoker::Options with_warnings(stoker::Options o, const std::shared_ptr<WarningQueue>& warnings) {
  o.on_warning = [warnings](std::string_view w) { warnings->push(w); };
  return o;
}

namespace {

using stoker::Options;

// 'a', 'b', 'c': an enum's names as a message lists them.
template <class Enum>
std::string quoted_names() {
  std::string out;
  for (std::string_view n : stoker::option_names<Enum>()) out += (out.empty() ? "'" : ", '") + std::string(n) + "'";
  return out;
}

// An enum member of Options as its name: read as text, set from text (its names only, as Python
// spells them: no '-' for '_').
template <class Enum, Enum Options::*member>
void bind_choice(nb::class_<Options>& c, const char* python_name) {
  c.def_prop_rw(
      python_name, [](const Options& o) { return std::string(stoker::name(o.*member)); },
      [python_name](Options& o, const std::string& text) {
        const std::optional<Enum> v = stoker::parse_option<Enum>(text);
        if (!v || text.find('-') != std::string::npos) bad(python_name, text, quoted_names<Enum>());
        o.*member = *v;
      });
}

// A duration member of Options in seconds.
template <std::chrono::milliseconds Options::*member>
void bind_seconds(nb::class_<Options>& c, const char* python_name) {
  c.def_prop_rw(
      python_name, [](const Options& o) { return static_cast<double>((o.*member).count()) / 1000.0; },
      [](Options& o, double seconds) { o.*member = std::chrono::milliseconds(std::llround(seconds * 1000.0)); });
}

// Options::transform from the package's Runner (python/stoker/_transform_runner.py), run here
// without workers, the host's argv and payload for workers, its fields as (name, dtype, shape,
// ragged, max_sample_bytes), and the host already started (a StartedHost, or None).
void set_transform(Options& o, nb::object runner, std::vector<std::string> host, const nb::bytes& payload,
                   const nb::list& fields, std::shared_ptr<stoker::StartedHost> started) {
  stoker::Transform& t = o.transform;
  t.started = std::move(started);
  t.local = make_py_transform(std::move(runner));
  t.host = std::move(host);
  t.payload.assign(payload.c_str(), payload.size());
  t.fields.clear();
  for (nb::handle f : fields) {
    const auto dtype = stoker::parse_dtype(nb::cast<std::string>(f[1]));
    if (!dtype) throw stoker::Error(stoker::ErrorCode::invalid_option, "stoker: transform: unknown dtype");
    t.fields.push_back(stoker::TransformField{nb::cast<std::string>(f[0]), *dtype,
                                              nb::cast<std::vector<std::int64_t>>(f[2]), nb::cast<bool>(f[3]),
                                              nb::cast<std::uint64_t>(f[4])});
  }
}

}  // namespace

void bind_options(nb::module_& m) {
  m.attr("AUTO") = stoker::kAuto;  // for num_workers and prefetch
  nb::dict names;
  const auto add_names = [&names]<class Enum>(Enum) {
    nb::list l;
    for (std::string_view n : stoker::option_names<Enum>()) l.append(nb::str(n.data(), n.size()));
    const std::string_view option = stoker::OptionValues<Enum>::option;
    names[nb::str(option.data(), option.size())] = l;
  };
  add_names(stoker::Format{});
  add_names(stoker::Order{});
  add_names(stoker::OnDecodeError{});
  add_names(stoker::ShmBacking{});
  add_names(stoker::Staging{});
  m.attr("option_names") = names;  // {"order": ["sequential", ...], ...}

  nb::class_<Options> c(m, "Options");
  c.def(nb::init<>())
      .def_rw("source", &Options::source)
      .def_rw("sources", &Options::sources)
      .def_prop_rw(
          "mix",
          [](const Options& o) {
            std::vector<std::pair<std::string, double>> out;
            for (const stoker::Source& s : o.mix) out.emplace_back(s.path, s.weight);
            return out;
          },
          [](Options& o, const std::vector<std::pair<std::string, double>>& mix) {
            o.mix.clear();
            for (const auto& [path, weight] : mix) o.mix.push_back(stoker::Source{path, weight});
          })
      .def_rw("samples_per_epoch", &Options::samples_per_epoch)
      .def_rw("cache_dir", &Options::cache_dir)
      .def_rw("cache_limit", &Options::cache_limit)
      .def_rw("fetch_parallelism", &Options::fetch_parallelism)
      .def_rw("max_open_shards", &Options::max_open_shards)
      .def_rw("fields", &Options::fields)
      .def_rw("group", &Options::group)
      .def_rw("lmdb_keys", &Options::lmdb_keys)
      .def_rw("lmdb_count_key", &Options::lmdb_count_key)
      .def_rw("pipeline", &Options::pipeline)
      .def_rw("op_libraries", &Options::op_libraries)
      .def_rw("max_image_pixels", &Options::max_image_pixels)
      .def_rw("batch_size", &Options::batch_size)
      .def_rw("num_workers", &Options::num_workers)
      .def_rw("prefetch", &Options::prefetch)
      .def_rw("held_batches", &Options::held_batches)
      .def_rw("shuffle", &Options::shuffle)
      .def_rw("seed", &Options::seed)
      .def_rw("drop_last", &Options::drop_last)
      .def_rw("shm_budget", &Options::shm_budget)
      .def_rw("shm_fraction", &Options::shm_fraction)
      .def_rw("max_respawns", &Options::max_respawns)
      .def_rw("worker_oom_score_adj", &Options::worker_oom_score_adj)
      .def_rw("prefetch_to_device", &Options::prefetch_to_device)
      .def_rw("trace", &Options::trace)
      .def_prop_rw(
          "device", [](const Options& o) { return o.device.str(); },
          [](Options& o, const std::string& text) { o.device = stoker::Device::parse(text); })
      .def_prop_rw(
          "shard_rank", [](const Options& o) { return o.shard.rank; },
          [](Options& o, std::uint32_t rank) { o.shard.rank = rank; })
      .def_prop_rw(
          "shard_world_size", [](const Options& o) { return o.shard.world_size; },
          [](Options& o, std::uint32_t world) { o.shard.world_size = world; })
      .def("shard_from_env", [](Options& o) { o.shard = stoker::Shard::from_env(); })
      .def("set_transform", &set_transform, nb::arg("runner"), nb::arg("host"), nb::arg("payload"), nb::arg("fields"),
           nb::arg("started").none())
      // Ends the started host unless a Loader took it: for a Loader that failed to build.
      .def("discard_transform_host", [](Options& o) {
        if (o.transform.started) o.transform.started->discard();
      });
  bind_choice<stoker::Format, &Options::format>(c, "format");
  bind_choice<stoker::Order, &Options::order>(c, "order");
  bind_choice<stoker::OnDecodeError, &Options::on_decode_error>(c, "on_decode_error");
  bind_choice<stoker::ShmBacking, &Options::shm_backing>(c, "shm_backing");
  bind_choice<stoker::Staging, &Options::staging>(c, "staging");
  bind_seconds<&Options::timeout>(c, "timeout_s");
  bind_seconds<&Options::shutdown_grace>(c, "shutdown_grace_s");
  bind_seconds<&Options::fetch_timeout>(c, "fetch_timeout_s");
}

}  // namespace stoker_py
