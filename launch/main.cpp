// build/bin/lockstep: the per-rank CLI (DESIGN.md section 6).
#include <CLI/CLI.hpp>
#include <cstdio>

int main(int argc, char** argv) {
  CLI::App app{"lockstep: bitwise-reproducible distributed training"};
  app.require_subcommand(1);
  auto* info = app.add_subcommand("info", "print build facts");
  (void)info;
  CLI11_PARSE(app, argc, argv);
  std::puts("lockstep");
  return 0;
}
