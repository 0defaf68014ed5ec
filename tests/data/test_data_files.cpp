// data.train entries: files, folders, glob patterns and gzip-compressed files, and the errors for each.
#include <gtest/gtest.h>
#include <zlib.h>

#include "moetune/core/error.h"
#include "moetune/data/data_files.h"
#include "test_util.h"

namespace moetune::data {
namespace {

namespace fs = std::filesystem;

void write_gzip(const fs::path& path, const std::string& text) {
  gzFile out = gzopen(path.c_str(), "wb");
  ASSERT_NE(out, nullptr);
  ASSERT_EQ(gzwrite(out, text.data(), unsigned(text.size())), int(text.size()));
  gzclose(out);
}

class DataFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(dir_ / "data" / "sub");
    testing::write_file(dir_ / "data" / "b.jsonl", "{\"text\": \"b\"}\n");
    write_gzip(dir_ / "data" / "a.jsonl.gz", "{\"text\": \"a\"}\n");
    testing::write_file(dir_ / "data" / "notes.txt", "not data");
    testing::write_file(dir_ / "data" / "sub" / "c.jsonl", "{\"text\": \"c\"}\n");
  }
  std::vector<fs::path> resolve(const std::vector<std::string>& entries) {
    return resolve_data_files(entries, "data.train", dir_ / "scratch");
  }
  std::string error(const std::vector<std::string>& entries) {
    try {
      resolve(entries);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  testing::ScratchDir dir_;
};

TEST_F(DataFiles, AFolderGivesItsJsonlAndGzipFilesByNameDecompressed) {
  const std::vector<fs::path> files = resolve({(dir_ / "data").string()});
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0], dir_ / "scratch" / "0-a.jsonl");
  EXPECT_EQ(testing::read_file(files[0]), "{\"text\": \"a\"}\n");
  EXPECT_EQ(files[1], dir_ / "data" / "b.jsonl");
}

TEST_F(DataFiles, PatternsAndPlainFiles) {
  EXPECT_EQ(resolve({(dir_ / "data" / "*.jsonl").string()}), std::vector<fs::path>{dir_ / "data" / "b.jsonl"});
  EXPECT_EQ(resolve({(dir_ / "data" / "*" / "*.jsonl").string(), (dir_ / "data" / "b.jsonl").string()}),
            (std::vector<fs::path>{dir_ / "data" / "sub" / "c.jsonl", dir_ / "data" / "b.jsonl"}));
}

TEST_F(DataFiles, ErrorsSayWhatWasNamedAndWhatIsMissing) {
  EXPECT_NE(error({(dir_ / "nope.jsonl").string()}).find("data.train: " + (dir_ / "nope.jsonl").string() + " does not exist"),
            std::string::npos);
  EXPECT_NE(error({(dir_ / "data" / "*.parquet").string()}).find("matches no file"), std::string::npos);
  fs::create_directories(dir_ / "empty");
  EXPECT_NE(error({(dir_ / "empty").string()}).find("holds no *.jsonl or *.jsonl.gz file"), std::string::npos);
  testing::write_file(dir_ / "plain.jsonl.gz", "{\"text\": \"x\"}\n");
  EXPECT_NE(error({(dir_ / "plain.jsonl.gz").string()}).find("not gzip-compressed"), std::string::npos);
  write_gzip(dir_ / "whole.jsonl.gz", std::string(10000, 'x'));
  const std::string whole = testing::read_file(dir_ / "whole.jsonl.gz");
  testing::write_file(dir_ / "cut.jsonl.gz", whole.substr(0, whole.size() / 2));
  EXPECT_NE(error({(dir_ / "cut.jsonl.gz").string()}).find("cannot decompress"), std::string::npos);
}

}  // namespace
}  // namespace moetune::data
