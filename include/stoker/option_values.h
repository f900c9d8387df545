// stoker/option_values.h: the values of each option enum as text, written once.
//
// The one spelling that stoker's command-line tools and its Python package accept and print, and
// that its messages use: "auto", "hdf5", "quasi_random", "dev_shm", "pinned_copy", ...
//
//   stoker::name(stoker::Order::quasi_random)                 // "quasi_random"
//   stoker::parse_option<stoker::Order>("quasi-random")       // Order::quasi_random ('-' for '_')
//   stoker::option_names<stoker::ShmBacking>()                // "auto", "dev_shm", "memfd"
//
// Header-only and constexpr: the tables below are the whole of it.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>
#include <utility>

#include "stoker/device.h"
#include "stoker/options.h"

namespace stoker {

// For each option enum, every value and its name, in the order messages list them; `option` is
// the Options member it sets.
template <class Enum>
struct OptionValues;

template <>
struct OptionValues<Format> {
  static constexpr std::string_view option = "format";
  static constexpr std::array<std::pair<Format, std::string_view>, 3> all{
      {{Format::auto_detect, "auto"}, {Format::hdf5, "hdf5"}, {Format::lmdb, "lmdb"}}};
};

template <>
struct OptionValues<Order> {
  static constexpr std::string_view option = "order";
  static constexpr std::array<std::pair<Order, std::string_view>, 3> all{
      {{Order::sequential, "sequential"}, {Order::random, "random"}, {Order::quasi_random, "quasi_random"}}};
};

template <>
struct OptionValues<OnDecodeError> {
  static constexpr std::string_view option = "on_decode_error";
  static constexpr std::array<std::pair<OnDecodeError, std::string_view>, 2> all{
      {{OnDecodeError::fail, "fail"}, {OnDecodeError::skip, "skip"}}};
};

template <>
struct OptionValues<ShmBacking> {
  static constexpr std::string_view option = "shm_backing";
  static constexpr std::array<std::pair<ShmBacking, std::string_view>, 3> all{
      {{ShmBacking::automatic, "auto"}, {ShmBacking::dev_shm, "dev_shm"}, {ShmBacking::memfd, "memfd"}}};
};

template <>
struct OptionValues<Staging> {
  static constexpr std::string_view option = "staging";
  static constexpr std::array<std::pair<Staging, std::string_view>, 3> all{
      {{Staging::automatic, "auto"},
       {Staging::pinned_copy, "pinned_copy"},
       {Staging::registered_shm, "registered_shm"}}};
};

// The name of `value`; "" for a value outside the enum (a cast).
template <class Enum>
requires requires { OptionValues<Enum>::all; }
constexpr std::string_view name(Enum value) noexcept {
  for (const auto& [v, n] : OptionValues<Enum>::all) {
    if (v == value) return n;
  }
  return {};
}

// The value named `text`, where a command line may write '-' for '_' ("dev-shm"); nullopt for any
// other text.
template <class Enum>
requires requires { OptionValues<Enum>::all; }
constexpr std::optional<Enum> parse_option(std::string_view text) noexcept {
  for (const auto& [v, n] : OptionValues<Enum>::all) {
    if (n.size() != text.size()) continue;
    bool same = true;
    for (std::size_t i = 0; i < n.size() && same; ++i) same = text[i] == n[i] || (n[i] == '_' && text[i] == '-');
    if (same) return v;
  }
  return std::nullopt;
}

// Every value's name, in the table's order.
template <class Enum>
constexpr std::array<std::string_view, OptionValues<Enum>::all.size()> option_names() noexcept {
  std::array<std::string_view, OptionValues<Enum>::all.size()> out{};
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = OptionValues<Enum>::all[i].second;
  return out;
}

}  // namespace stoker
