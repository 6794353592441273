// The Catch2 v2 main for single-process unit tests.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
