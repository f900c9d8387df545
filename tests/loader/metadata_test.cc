// Loader::metadata(): what the dataset stores beside its samples, the same whether the loader read
// the file itself or its probe process did.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "stoker/loader.h"
#include "tests/support/test_data.h"

namespace stoker::test {
namespace {

using Metadata = std::map<std::string, std::string>;

TEST(LoaderMetadata, TheDatasetsRecordsWithWorkersOrWithout) {
  TempDir tmp;
  write_lmdb(tmp.path("d.lmdb"), small_schema(40));
  const std::string labels = R"({"label": ["ant", "bee", "cicada"]})";
  write_lmdb_meta_in_place(tmp.path("d.lmdb"), {{"labels", labels}, {"progress", "private"}});
  for (const std::size_t workers : {0u, 2u}) {
    Options o;
    o.source = tmp.path("d.lmdb");
    o.batch_size = 8;
    o.num_workers = workers;
    Loader loader(o);
    EXPECT_EQ(loader.metadata(), (Metadata{{"labels", labels}})) << workers << " workers";
  }
}

TEST(LoaderMetadata, NoneForADatasetThatStoresNone) {
  TempDir tmp;
  write_hdf5(tmp.path("d.h5"), small_schema(16), {});
  Options o;
  o.source = tmp.path("d.h5");
  o.batch_size = 4;
  o.num_workers = 1;
  Loader loader(o);
  EXPECT_TRUE(loader.metadata().empty());
}

}  // namespace
}  // namespace stoker::test
