// base: stoker::printable, text from files as stoker prints it.
#include <gtest/gtest.h>

#include <string>

#include "stoker/error.h"

namespace stoker::test {
namespace {

using namespace std::string_literals;

TEST(Printable, PrintableUtf8IsUnchanged) {
  EXPECT_EQ(printable("train/images"), "train/images");
  EXPECT_EQ(printable("caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x90\x88"),
            "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x90\x88");
  EXPECT_EQ(printable(""), "");
}

TEST(Printable, ControlCharactersAreEscapedSoNoNameCanActOnATerminal) {
  EXPECT_EQ(printable("a\x1b[2Jb"), "a\\x1b[2Jb");
  EXPECT_EQ(printable("line\nforged: ok"), "line\\nforged: ok");
  EXPECT_EQ(printable("x\ry\tz"), "x\\ry\\tz");
  EXPECT_EQ(printable("a\0b"s), "a\\0b");
  EXPECT_EQ(printable("\x07\x7f"), "\\x07\\x7f");
  // C1 controls (U+009B is a CSI of its own on some terminals) and U+0085, the next-line character.
  EXPECT_EQ(printable("\xc2\x9b"
                      "2J\xc2\x85"),
            "\\u009b2J\\u0085");
}

TEST(Printable, LineSeparatorsAndInvisibleOrBidirectionalCharactersAreEscaped) {
  EXPECT_EQ(printable("a\xe2\x80\xa8"
                      "b\xe2\x80\xa9"),
            "a\\u2028b\\u2029");  // line, paragraph separator
  EXPECT_EQ(printable("admin\xe2\x80\xae"
                      "txt.exe"),
            "admin\\u202etxt.exe");                                      // right-to-left override
  EXPECT_EQ(printable("\xe2\x81\xa6x\xe2\x81\xa9"), "\\u2066x\\u2069");  // isolates
  EXPECT_EQ(printable("a\xe2\x80\x8b"
                      "b\xef\xbb\xbf"),
            "a\\u200bb\\ufeff");                            // zero width, BOM
  EXPECT_EQ(printable("\xf3\xa0\x80\x81"), "\\U000e0001");  // a tag character
}

TEST(Printable, BytesThatAreNotUtf8AreWrittenAsHex) {
  EXPECT_EQ(printable("a\xff"
                      "b"),
            "a\\xffb");
  EXPECT_EQ(printable("\x80"), "\\x80");                             // a stray continuation byte
  EXPECT_EQ(printable("\xc3"), "\\xc3");                             // a sequence cut short at the end
  EXPECT_EQ(printable("\xe6\x97x"), "\\xe6\\x97x");                  // ... or in the middle
  EXPECT_EQ(printable("\xc0\xaf"), "\\xc0\\xaf");                    // an overlong '/'
  EXPECT_EQ(printable("\xe0\x80\xaf"), "\\xe0\\x80\\xaf");           // ... of three bytes
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");           // a surrogate
  EXPECT_EQ(printable("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // past U+10FFFF
}

TEST(Printable, ANameDoublesItsBackslashesSoTwoNamesNeverPrintAlike) {
  // Without the doubling, the name holding an escape's text would print as the one holding the byte.
  EXPECT_EQ(printable("a\\x1b"), "a\\\\x1b");
  EXPECT_NE(printable("a\\x1b"), printable("a\x1b"));
  EXPECT_EQ(printable("a\\nb"), "a\\\\nb");
  // A message of names already printable keeps its backslashes, and is still made safe.
  EXPECT_EQ(printable("field 'a\\x1b': bad\x1b[0m", Printable::message), "field 'a\\x1b': bad\\x1b[0m");
}

}  // namespace
}  // namespace stoker::test
