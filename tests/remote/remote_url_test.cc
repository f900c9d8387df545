// Remote names: brace ranges expanded as WebDataset writes them, a URL's file name, and a URL's
// password never shown.
#include "remote/remote_url.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>

#include "remote/s3_store.h"
#include "stoker/error.h"
#include "tests/support/test_data.h"

namespace stoker::test {
namespace {

using ::testing::ElementsAre;

TEST(RemoteUrl, BraceRangesAndListsExpandInOrderKeepingTheirZeros) {
  EXPECT_THAT(remote::expand_braces("https://h/train-{00008..00011}.h5"),
              ElementsAre("https://h/train-00008.h5", "https://h/train-00009.h5", "https://h/train-00010.h5",
                          "https://h/train-00011.h5"));
  EXPECT_THAT(remote::expand_braces("http://h/{a,b}/s-{1..2}.lmdb"),
              ElementsAre("http://h/a/s-1.lmdb", "http://h/a/s-2.lmdb", "http://h/b/s-1.lmdb", "http://h/b/s-2.lmdb"));
  EXPECT_THAT(remote::expand_braces("https://h/one.h5"), ElementsAre("https://h/one.h5"));
  expect_error(ErrorCode::invalid_option, [] { (void)remote::expand_braces("https://h/x-{3..1}.h5"); },
               {"the range '{3..1}' runs backwards"});
  expect_error(ErrorCode::invalid_option, [] { (void)remote::expand_braces("https://h/x-{0..9.h5"); },
               {"is not closed"});
  expect_error(ErrorCode::invalid_option, [] { (void)remote::expand_braces("https://h/x-{0..99999999}.h5"); },
               {"names more than 1000000 shards"});
}

TEST(RemoteUrl, NamesAndPasswords) {
  EXPECT_TRUE(remote::is_remote("https://h/a.h5"));
  EXPECT_FALSE(remote::is_remote("/data/https/a.h5"));
  EXPECT_EQ(remote::url_file_name("https://h/d/train-1.h5?versionId=3#x"), "train-1.h5");
  EXPECT_EQ(remote::shown_url("https://user:secret@h/d/a.h5"), "https://***@h/d/a.h5");
  EXPECT_EQ(remote::shown_url("https://h/d/a@b.h5"), "https://h/d/a@b.h5");
}

TEST(RemoteUrl, AnExpansionTooLargeInBytesIsAnError) {
  const std::string pattern = "https://h/" + std::string(4000, 'x') + "-{0..999999}.h5";
  expect_error(ErrorCode::invalid_option, [&] { (void)remote::expand_braces(pattern); }, {"MiB"});
}

// A ListObjectsV2 page: its shards (entities decoded, ETags without quotes, hidden names and lock
// files left out), whether it is cut short and its token; a size that is no number is an error.
TEST(S3Listing, APageGivesItsShardsAndWhetherMoreFollow) {
  remote::S3Config c;
  c.endpoint = "http://store:9000";
  const remote::ListingPage page = remote::parse_listing(
      "<ListBucketResult><IsTruncated>true</IsTruncated><NextContinuationToken>t&amp;2</NextContinuationToken>"
      "<Contents><Key>train/a&amp;b.h5</Key><Size>123</Size><ETag>&quot;9b2c&quot;</ETag></Contents>"
      "<Contents><Key>train/.hidden.h5</Key><Size>1</Size></Contents>"
      "<Contents><Key>train/lock.mdb</Key><Size>8192</Size></Contents>"
      "<Contents><Key>train/notes.txt</Key><Size>5</Size></Contents>"
      "<Contents><Key>train/b.lmdb</Key><Size>7</Size></Contents></ListBucketResult>",
      c, "data");
  ASSERT_EQ(page.objects.size(), 2u);
  EXPECT_EQ(page.objects[0].object.name, "s3://data/train/a&b.h5");
  EXPECT_EQ(page.objects[0].object.url, "http://store:9000/data/train/a%26b.h5");
  EXPECT_EQ(page.objects[0].info->size, 123u);
  EXPECT_EQ(page.objects[0].info->etag, "9b2c");
  EXPECT_EQ(page.objects[1].object.name, "s3://data/train/b.lmdb");
  EXPECT_TRUE(page.truncated);
  EXPECT_EQ(page.next, "t&2");
  expect_error(ErrorCode::dataset,
               [&] { (void)remote::parse_listing("<Contents><Key>x.h5</Key><Size>-1</Size></Contents>", c, "d"); },
               {"s3://d/x.h5: the listing gives its size as '-1', not a number"});
}

// The AWS settings as the CLI reads them: variables first, then the profile of the files.
TEST(S3Config, VariablesFirstThenTheProfileOfTheFilesElseDefaults) {
  TempDir tmp;
  {
    std::ofstream(tmp.path("credentials")) << "[default]\naws_access_key_id = D\naws_secret_access_key = DS\n"
                                              "[lab]\n# a comment\naws_access_key_id=L\naws_secret_access_key=LS\n"
                                              "aws_session_token = LT\n";
  }
  { std::ofstream(tmp.path("config")) << "[profile lab]\nregion = eu-west-3\nendpoint_url = http://minio:9000/\n"; }
  for (const char* v : {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION",
                        "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE"})
    ::unsetenv(v);
  ::setenv("AWS_SHARED_CREDENTIALS_FILE", tmp.path("credentials").c_str(), 1);
  ::setenv("AWS_CONFIG_FILE", tmp.path("config").c_str(), 1);
  remote::S3Config d = remote::S3Config::from_environment();
  EXPECT_EQ(d.access_key, "D");
  EXPECT_EQ(d.region, "us-east-1");
  EXPECT_EQ(d.endpoint, "");
  EXPECT_EQ(remote::s3_url(d, "b", "train/a b.h5"), "https://b.s3.us-east-1.amazonaws.com/train/a%20b.h5");
  EXPECT_EQ(remote::s3_url(d, "my.bucket", "k.h5"), "https://s3.us-east-1.amazonaws.com/my.bucket/k.h5");
  ::setenv("AWS_PROFILE", "lab", 1);
  remote::S3Config lab = remote::S3Config::from_environment();
  EXPECT_EQ(lab.access_key, "L");
  EXPECT_EQ(lab.session_token, "LT");
  EXPECT_EQ(lab.region, "eu-west-3");
  EXPECT_EQ(lab.endpoint, "http://minio:9000");
  EXPECT_EQ(remote::s3_url(lab, "b", "k.h5"), "http://minio:9000/b/k.h5");
  ::setenv("AWS_ACCESS_KEY_ID", "E", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "ES", 1);
  ::setenv("AWS_REGION", "ap-south-1", 1);
  remote::S3Config vars = remote::S3Config::from_environment();
  EXPECT_EQ(vars.access_key, "E");
  EXPECT_EQ(vars.session_token, "");
  EXPECT_EQ(vars.region, "ap-south-1");
  ::setenv("AWS_PROFILE", "nobody", 1);
  ::unsetenv("AWS_ACCESS_KEY_ID");
  expect_error(ErrorCode::invalid_option, [] { (void)remote::S3Config::from_environment(); },
               {"AWS_PROFILE is 'nobody', which neither", tmp.path("credentials")});
  for (const char* v :
       {"AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_PROFILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE"})
    ::unsetenv(v);
}

}  // namespace
}  // namespace stoker::test
