// The `eventide` program's entry point. The program is cli::run_command_line (main.cpp), which
// the Python package's `eventide` command calls too.
#include "cli.hpp"

int main(int argc, char** argv) { return eventide::cli::run_command_line(argc, argv); }
