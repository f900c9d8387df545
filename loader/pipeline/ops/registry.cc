#include "loader/pipeline/ops/registry.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <utility>
#include <vector>

#include "loader/pipeline/ops/image_ops.h"
#include "stoker/error.h"
#include "stoker/pipeline.h"

namespace stoker {
namespace detail {
namespace {

std::map<std::string, UserOp, std::less<>>& user_ops() {
  static std::map<std::string, UserOp, std::less<>> ops;
  return ops;
}

const BuiltinOp* find_builtin(std::string_view name) {
  const auto& ops = builtin_ops();
  const auto it = std::find_if(ops.begin(), ops.end(), [&](const BuiltinOp& b) { return b.name == name; });
  return it == ops.end() ? nullptr : &*it;
}

// "decode, decode_jpeg, ..., invert": the built-in operations in documentation order, then the
// user's, by name.
std::string known_ops() {
  std::vector<std::string_view> names;
  for (const BuiltinOp& b : builtin_ops()) names.push_back(b.name);
  for (const auto& [name, op] : user_ops()) names.push_back(name);
  return fmt::format("{}", fmt::join(names, ", "));
}

class UserOpAdapter final : public Op {
 public:
  UserOpAdapter(OpText t, const UserOp& op) : Op(std::move(t)), op_(op) {}
  Spec bind(const Spec& in) override {
    const OpSpec out = op_.spec(OpSpec{in.bytes, in.dtype, in.shape}, text_.args);
    return Spec{out.bytes, out.dtype, out.shape, in.chw && out.shape == in.shape};
  }
  // What a user's code throws is named with its operation (the worker adds file, field and
  // sample); anything, a std::exception or not, becomes a stoker::Error.
  void run(const SampleIn& in, SampleOut& out, SampleRandom& random) override {
    try {
      op_.run(in, out, text_.args, random);
    } catch (const Error& e) {
      throw Error(e.code(), fmt::format("operation '{}': {}", text_.text, e.what()));
    } catch (const std::exception& e) {
      throw Error(ErrorCode::dataset, fmt::format("operation '{}': {}", text_.text, e.what()));
    } catch (...) {
      throw Error(ErrorCode::dataset,
                  fmt::format("operation '{}' threw an exception that is not a std::exception", text_.text));
    }
  }

 private:
  UserOp op_;
};

}  // namespace

std::unique_ptr<Op> make_op(const OpText& t) {
  if (const BuiltinOp* b = find_builtin(t.name)) return b->make(t);
  const auto user = user_ops().find(t.name);
  if (user != user_ops().end()) return std::make_unique<UserOpAdapter>(t, user->second);
  throw Error(ErrorCode::invalid_option, fmt::format("unknown operation '{}' (operations: {})", t.name, known_ops()));
}

}  // namespace detail

namespace detail {

std::vector<std::string>*& registration_errors() {
  static std::vector<std::string>* sink = nullptr;
  return sink;
}

std::size_t user_op_count() noexcept { return user_ops().size(); }

void collect_registration_errors(std::vector<std::string>* sink) noexcept { registration_errors() = sink; }

}  // namespace detail

bool register_op(const std::string& name, UserOp op) {
  if (std::vector<std::string>* sink = detail::registration_errors()) {
    // A library being loaded (op_library.h): its static initialisers must not throw.
    struct Collecting {  // the sink back whatever happens below
      std::vector<std::string>* sink;
      ~Collecting() { detail::collect_registration_errors(sink); }
    } collecting{sink};
    detail::collect_registration_errors(nullptr);
    try {
      register_op(name, std::move(op));
    } catch (const std::exception& e) {
      sink->push_back(e.what());
    } catch (...) {
      sink->push_back(fmt::format("register_op: operation '{}' could not be registered", name));
    }
    return true;
  }
  if (name.empty() || !std::all_of(name.begin(), name.end(),
                                   [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; })) {
    throw Error(ErrorCode::invalid_option,
                fmt::format("register_op: '{}' is not a valid operation name (letters, digits and _)", name));
  }
  if (detail::find_builtin(name) || detail::user_ops().count(name)) {
    throw Error(ErrorCode::invalid_option,
                fmt::format("register_op: an operation named '{}' is already registered", name));
  }
  if (!op.spec || !op.run)
    throw Error(ErrorCode::invalid_option, fmt::format("register_op: operation '{}' needs both spec and run", name));
  detail::user_ops().emplace(name, std::move(op));
  return true;
}

}  // namespace stoker
