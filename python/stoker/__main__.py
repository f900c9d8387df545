"""python -m stoker --cmake-dir: where the package's CMake package is, for find_package(stoker)
(CMAKE_PREFIX_PATH) when building a library of pipeline operations for op_libraries=."""

import argparse
import sys

from . import __version__, cmake_prefix_path


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m stoker", description=__doc__)
    p.add_argument("--cmake-dir", action="store_true", help="print the directory to add to CMAKE_PREFIX_PATH")
    p.add_argument("--version", action="store_true", help="print stoker's version")
    a = p.parse_args(argv)
    if a.cmake_dir:
        print(cmake_prefix_path)
    elif a.version:
        print(__version__)
    else:
        p.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
