#include "loader/pipeline/pipeline.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <utility>

#include "loader/pipeline/ops/image_ops.h"
#include "loader/pipeline/ops/op.h"
#include "loader/pipeline/ops/registry.h"
#include "stoker/error.h"

namespace stoker {

namespace detail {
namespace {

// ---- parsing ----

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

OpText parse_op(std::string_view text, std::string_view field) {
  OpText op;
  op.text = std::string(trim(text));
  std::string_view t = op.text;
  const auto paren = t.find('(');
  op.name = std::string(trim(t.substr(0, paren)));
  if (op.name.empty())
    throw Error(ErrorCode::invalid_option, fmt::format("pipeline: field '{}': an empty operation", field));
  if (paren == std::string_view::npos) return op;
  if (t.back() != ')')
    throw Error(ErrorCode::invalid_option,
                fmt::format("pipeline: field '{}': '{}' lacks its closing ')'", field, op.text));
  std::string_view args = t.substr(paren + 1, t.size() - paren - 2);
  if (trim(args).empty()) return op;
  for (std::size_t start = 0; start <= args.size();) {
    const auto end = std::min(args.find(',', start), args.size());
    const std::string_view a = trim(args.substr(start, end - start));
    double v = 0;
    const auto [ptr, ec] = std::from_chars(a.data(), a.data() + a.size(), v);
    if (a.empty() || ec != std::errc() || ptr != a.data() + a.size() || !std::isfinite(v)) {
      throw Error(ErrorCode::invalid_option,
                  fmt::format("pipeline: field '{}': '{}': argument {} ('{}') is not a number", field, op.text,
                              op.args.size() + 1, a));
    }
    op.args.push_back(v);
    start = end + 1;
  }
  return op;
}

// Adjacent operations that run as one pass are fused, again and again until no pair is left (a
// fused pair may fuse with the next one); `names` ("a+b") and `made` (what each makes) follow.
void fuse_adjacent(std::vector<std::unique_ptr<Op>>& ops, std::vector<std::string>& names, std::vector<Spec> made) {
  for (bool fused = true; fused;) {
    fused = false;
    for (std::size_t i = 0; i + 1 < ops.size(); ++i) {
      if (auto both = fuse(ops[i], ops[i + 1], made[i + 1])) {
        ops[i] = std::move(both);
        names[i] += "+" + names[i + 1];
        made[i] = made[i + 1];
        const auto next = static_cast<std::ptrdiff_t>(i) + 1;
        ops.erase(ops.begin() + next);
        names.erase(names.begin() + next);
        made.erase(made.begin() + next);
        fused = true;
      }
    }
  }
}

}  // namespace

std::vector<FieldPipelineText> parse_pipeline(std::string_view text) {
  std::vector<FieldPipelineText> out;
  for (std::size_t start = 0; start <= text.size();) {
    const auto end = std::min(text.find(';', start), text.size());
    const std::string_view part = trim(text.substr(start, end - start));
    start = end + 1;
    if (part.empty()) continue;
    const auto eq = part.find('=');
    if (eq == std::string_view::npos) {
      throw Error(ErrorCode::invalid_option,
                  fmt::format("pipeline: '{}' is not FIELD=operations (e.g. jpeg=decode,center_crop(224))", part));
    }
    FieldPipelineText f;
    f.field = std::string(trim(part.substr(0, eq)));
    if (f.field.empty())
      throw Error(ErrorCode::invalid_option, fmt::format("pipeline: '{}' names no field before '='", part));
    for (const auto& other : out) {
      if (other.field == f.field)
        throw Error(ErrorCode::invalid_option, fmt::format("pipeline: field '{}' has two pipelines", f.field));
    }
    const std::string_view ops = part.substr(eq + 1);
    int depth = 0;
    std::size_t op_start = 0;
    for (std::size_t i = 0; i <= ops.size(); ++i) {
      const char ch = i < ops.size() ? ops[i] : ',';
      if (ch == '(') ++depth;
      if (ch == ')') --depth;
      if (depth < 0)
        throw Error(ErrorCode::invalid_option,
                    fmt::format("pipeline: field '{}': unbalanced ')' in '{}'", f.field, ops));
      if (ch == ',' && depth == 0) {
        f.ops.push_back(parse_op(ops.substr(op_start, i - op_start), f.field));
        op_start = i + 1;
      }
    }
    if (depth != 0)
      throw Error(ErrorCode::invalid_option, fmt::format("pipeline: field '{}': unbalanced '(' in '{}'", f.field, ops));
    out.push_back(std::move(f));
  }
  return out;
}

struct SamplePipelines::Chain {
  std::size_t field = 0;
  std::vector<std::unique_ptr<Op>> ops;  // bound, and fused where a pair runs in one pass
  std::vector<std::string> op_names;     // per op: its text, a fused pair's "a+b"
  std::size_t first_stage = 0;           // stage_ns_'s entry of ops[0]
  Spec input;
  std::vector<std::int64_t> output_shape;
  std::string text;
  SampleOut a, b;
};

SamplePipelines::SamplePipelines() = default;
SamplePipelines::SamplePipelines(SamplePipelines&&) noexcept = default;
SamplePipelines& SamplePipelines::operator=(SamplePipelines&&) noexcept = default;
SamplePipelines::~SamplePipelines() = default;

SamplePipelines::SamplePipelines(std::string_view text, const Schema& source, std::uint64_t seed,
                                 const OpLimits& limits)
    : output_(source), seed_(seed) {
  by_field_.assign(source.fields.size(), nullptr);
  for (const auto& fp : parse_pipeline(text)) {
    const Field* field = source.find(fp.field);
    if (!field) {
      throw Error(ErrorCode::invalid_option,
                  fmt::format("pipeline: no field '{}' to run it on (fields: {})", fp.field, source.describe_fields()));
    }
    auto chain = std::make_unique<Chain>();
    chain->field = static_cast<std::size_t>(field - source.fields.data());
    chain->input =
        field->is_bytes() ? Spec{true, field->dtype, {}, false} : Spec{false, field->dtype, field->shape, false};
    Spec spec = chain->input;
    std::vector<std::string> texts;
    std::vector<std::unique_ptr<Op>> bound;
    std::vector<Spec> outputs;
    for (const auto& op_text : fp.ops) {
      try {
        auto op = make_op(op_text);
        op->set_limits(limits);
        spec = op->bind(spec);
        bound.push_back(std::move(op));
        outputs.push_back(spec);
      } catch (const Error& e) {
        throw Error(ErrorCode::invalid_option,
                    fmt::format("pipeline: field '{}', operation {}: {}", fp.field, bound.size() + 1, e.what()));
      }
      texts.push_back(op_text.text);
    }
    std::vector<std::string> names = texts;
    fuse_adjacent(bound, names, outputs);
    for (std::size_t i = 0; i < bound.size(); ++i) {
      chain->ops.push_back(std::move(bound[i]));
      chain->op_names.push_back(names[i]);
    }
    chain->first_stage = stage_ns_.size();
    stage_ns_.resize(stage_ns_.size() + chain->ops.size(), 0);
    chain->text = fmt::format("{}={}", fp.field, fmt::join(texts, ","));
    const auto varies = [](const Spec& s) {
      return s.bytes || std::any_of(s.shape.begin(), s.shape.end(), [](std::int64_t d) { return d < 0; });
    };
    // A resize(S) among the operations whose output varies to the end (it keeps each image's
    // aspect ratio) is named as the reason; otherwise it is a decode.
    std::size_t keeps_aspect = outputs.size();
    for (std::size_t i = outputs.size(); i > 0 && varies(outputs[i - 1]); --i) {
      if (fp.ops[i - 1].name == "resize" && fp.ops[i - 1].args.size() == 1) {
        keeps_aspect = i - 1;
        break;
      }
    }
    if (keeps_aspect < outputs.size()) {
      throw Error(ErrorCode::invalid_option,
                  fmt::format("pipeline: field '{}', operation {}: '{}' keeps each image's aspect ratio, so the "
                              "height and width it makes differ per sample, and the pipeline ends in {} while a "
                              "batch holds one shape: follow it with an operation of a fixed output size "
                              "(center_crop(H,W), as torchvision's Resize(S) then CenterCrop), or give both sides "
                              "(resize(H,W))",
                              fp.field, keeps_aspect + 1, fp.ops[keeps_aspect].text, detail::describe(spec)));
    }
    if (varies(spec)) {
      throw Error(
          ErrorCode::invalid_option,
          fmt::format("pipeline: field '{}' ends in {}, whose size differs per sample: end it with an operation "
                      "of a fixed output size (resize(H,W), center_crop(H,W), random_resized_crop(H,W)), or "
                      "declare the size every image has with decode(H,W)",
                      fp.field, detail::describe(spec)));
    }
    chain->output_shape = spec.shape;
    Field& out = output_.fields[chain->field];
    out = Field{out.name, FieldKind::fixed, spec.dtype, spec.shape};
    by_field_[chain->field] = chain.get();
    chains_.push_back(std::move(chain));
  }
  output_.validate("pipeline");
}

std::vector<std::string> SamplePipelines::stage_names() const {
  std::vector<std::string> out;
  for (const auto& c : chains_) {
    for (const std::string& op : c->op_names) {
      std::string name = fmt::format("{}: {}", output_.fields[c->field].name, op);
      // A name once: a repeated operation is numbered ("jpeg: flip(0.5) #2").
      const auto same = std::count_if(out.begin(), out.end(),
                                      [&](const std::string& n) { return n == name || n.rfind(name + " #", 0) == 0; });
      out.push_back(same ? fmt::format("{} #{}", name, same + 1) : std::move(name));
    }
  }
  return out;
}

std::string SamplePipelines::describe() const {
  std::vector<std::string> parts;
  for (const Chain* c : by_field_) {
    if (c) parts.push_back(c->text);
  }
  return fmt::format("{}", fmt::join(parts, "; "));
}

SampleRandom sample_random(std::uint64_t seed, std::uint64_t epoch, std::uint64_t index, std::size_t f) {
  const std::uint64_t key[4] = {seed, epoch, index, f};
  return SampleRandom(XXH64(key, sizeof key, 0));
}

void SamplePipelines::run(std::size_t f, std::span<const std::byte> in, std::uint64_t epoch, std::uint64_t index,
                          std::byte* dst) {
  Chain& c = *by_field_[f];
  SampleRandom random = sample_random(seed_, epoch, index, f);
  const Field& field = output_.fields[f];
  SampleIn current{c.input.bytes, c.input.dtype, c.input.shape, in};
  SampleOut* out = &c.a;
  // Each operation's output is the next one's input; the last one writes into the batch. One
  // clock read per operation times them all (stage_ns).
  auto t = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < c.ops.size(); ++i) {
    out->set_target(i + 1 == c.ops.size() ? dst : nullptr, field.bytes_per_sample());
    c.ops[i]->run(current, *out, random);
    const auto now = std::chrono::steady_clock::now();
    stage_ns_[c.first_stage + i] +=
        static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(now - t).count());
    t = now;
    current = SampleIn{false, out->dtype(), out->shape(), std::as_const(*out).data()};
    out = out == &c.a ? &c.b : &c.a;
  }
  if (current.dtype != field.dtype ||
      !std::equal(current.shape.begin(), current.shape.end(), c.output_shape.begin(), c.output_shape.end())) {
    throw Error(ErrorCode::invalid_option,
                fmt::format("the pipeline made {}[{}], not the declared {}", dtype_name(current.dtype),
                            fmt::join(current.shape, ","), field.describe()));
  }
  if (current.data.data() != dst) std::memcpy(dst, current.data.data(), field.bytes_per_sample());
}

}  // namespace detail

void check_pipeline(std::string_view text) {
  for (const auto& f : detail::parse_pipeline(text)) {
    for (const auto& op : f.ops) {
      try {
        (void)detail::make_op(op);
      } catch (const Error& e) {
        throw Error(ErrorCode::invalid_option, fmt::format("pipeline: field '{}': {}", f.field, e.what()));
      }
    }
  }
}

}  // namespace stoker
