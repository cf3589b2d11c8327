// The translation unit that builds the tests' precompiled GoogleTest headers
// (tests/CMakeLists.txt); it defines nothing.
