// The test datasets written with LMDB's own calls (stoker's internal LMDB helpers), for the tests
// that link stoker_internal: databases as py-lmdb writes them, and damaged records.
#include "formats/lmdb/lmdb_env.h"
#include "tests/support/test_data.h"

namespace stoker::test {

void write_plain_lmdb(const std::string& path,
                      const std::vector<std::pair<std::vector<std::byte>, std::vector<std::byte>>>& records) {
  formats::LmdbEnv env;
  formats::check_mdb(mdb_env_set_mapsize(env.get(), 64 << 20), path);
  formats::check_mdb(mdb_env_open(env.get(), path.c_str(), MDB_NOSUBDIR | MDB_NOLOCK, 0644), path);
  formats::LmdbTxn txn(env.get(), 0, path);
  MDB_dbi dbi;
  formats::check_mdb(mdb_dbi_open(txn.get(), nullptr, 0, &dbi), path);
  for (const auto& [k, v] : records) {
    MDB_val key{k.size(), const_cast<std::byte*>(k.data())}, val{v.size(), const_cast<std::byte*>(v.data())};
    formats::check_mdb(mdb_put(txn.get(), dbi, &key, &val, 0), path);
  }
  txn.commit(path);
}

void overwrite_lmdb_record(const std::string& path, std::uint64_t index, std::string_view value) {
  formats::LmdbEnv env;
  formats::check_mdb(mdb_env_set_maxdbs(env.get(), 4), path);
  formats::check_mdb(mdb_env_open(env.get(), path.c_str(), MDB_NOSUBDIR | MDB_NOLOCK, 0644), path);
  formats::LmdbTxn txn(env.get(), 0, path);
  MDB_dbi dbi;
  formats::check_mdb(mdb_dbi_open(txn.get(), formats::kSamplesDb, 0, &dbi), path);
  unsigned char key[8];
  formats::encode_key(index, key);
  MDB_val k{8, key}, v{value.size(), const_cast<char*>(value.data())};
  formats::check_mdb(mdb_put(txn.get(), dbi, &k, &v, 0), path);
  txn.commit(path);
}

void write_lmdb_note_in_place(const std::string& path) { write_lmdb_meta_in_place(path, {{"note", "hello"}}); }

void write_lmdb_meta_in_place(const std::string& path,
                              const std::vector<std::pair<std::string, std::string>>& records) {
  formats::LmdbEnv env;
  formats::check_mdb(mdb_env_set_maxdbs(env.get(), 4), path);
  formats::check_mdb(mdb_env_open(env.get(), path.c_str(), MDB_NOSUBDIR | MDB_NOLOCK, 0644), path);
  formats::LmdbTxn txn(env.get(), 0, path);
  MDB_dbi dbi;
  formats::check_mdb(mdb_dbi_open(txn.get(), formats::kMetaDb, 0, &dbi), path);
  for (const auto& [key, value] : records) {
    MDB_val k{key.size(), const_cast<char*>(key.data())}, v{value.size(), const_cast<char*>(value.data())};
    formats::check_mdb(mdb_put(txn.get(), dbi, &k, &v, 0), path);
  }
  txn.commit(path);
}

}  // namespace stoker::test
