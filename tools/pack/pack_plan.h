// stoker-pack's plan: the samples to pack, in order, from an ImageFolder tree or a manifest of
// paths and labels, and the label fields with the names of their values.
//
//   ImageFolder   ROOT/<class>/<file>: classes are the sub-folders, sorted by name, labels 0..C-1;
//                 files sorted by path within a class
//   manifest      a CSV file with a header row, or JSON Lines (one object a line): a path column and
//                 label columns, each stored as a field: integers as i64, numbers as f64, strings
//                 as i64 indices into the sorted list of the column's distinct strings
//
// The plan is a pure function of the tree or manifest: a resumed pack recomputes it and checks its
// fingerprint.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "stoker/dtype.h"

namespace stoker::tools {

// One sample to pack: the file, and its label values in the order of the label fields.
struct PackItem {
  std::string path;
  std::string where;  // "manifest.csv:12 (/data/x.jpg)", or the path itself; printable (stoker/error.h)
  std::vector<std::variant<std::int64_t, double>> labels;
  std::string source = {};  // what the dataset records: relative to --folder ("cat/1.jpg"), or as the manifest has it
};

// A label field: its name, its type, and for strings (and ImageFolder classes) the names of its values.
struct LabelField {
  std::string name;
  DType dtype = DType::i64;
  std::vector<std::string> names;
};

struct PackPlan {
  std::vector<PackItem> items;
  std::vector<LabelField> labels;
};

struct ManifestColumns {
  std::string path_column = "path";
  std::vector<std::string> label_columns;
  std::string root;  // where relative paths start; empty: the manifest's folder
};

PackPlan image_folder(const std::string& root);
PackPlan manifest(const std::string& file, const ManifestColumns& columns);

// XXH64 of everything the plan says (paths, labels, label names), as 16 hex digits.
std::string plan_fingerprint(const PackPlan& plan);

}  // namespace stoker::tools
