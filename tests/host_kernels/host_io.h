// File reading and writing shared by the host runners of GPU kernels (run_*.cpp).
#pragma once
#include <cstdio>
#include <vector>

// Every byte of a file (empty where it cannot be read).
static std::vector<char> read_all(const char* path) {
  std::vector<char> bytes;
  FILE* f = fopen(path, "rb");
  if (f == nullptr) return bytes;
  char chunk[65536];
  size_t got;
  while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) {
    bytes.insert(bytes.end(), chunk, chunk + got);
  }
  fclose(f);
  return bytes;
}

// Writes size bytes to a file; false where it cannot.
static bool write_all(const char* path, const void* data, size_t size) {
  FILE* f = fopen(path, "wb");
  if (f == nullptr) return false;
  const bool ok = fwrite(data, 1, size, f) == size;
  return fclose(f) == 0 && ok;
}
