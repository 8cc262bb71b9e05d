// What cucache says on stderr during a few calls: the C++ tests of
// PyTorch's pluggable allocator entry points (test_torch_pools.cpp,
// test_torch_oom.cpp) capture it from construction to end().
#ifndef CUCACHE_TESTS_STDERR_CAPTURE_HPP
#define CUCACHE_TESTS_STDERR_CAPTURE_HPP

#include <cstdio>
#include <string>
#include <unistd.h>

class Stderr
{
  public:
    Stderr()
    {
        fflush(stderr);
        file_ = tmpfile();
        saved_ = dup(2);
        dup2(fileno(file_), 2);
    }
    std::string end()
    {
        fflush(stderr);
        dup2(saved_, 2);
        close(saved_);
        std::string text;
        rewind(file_);
        char buf[1024];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, file_)) > 0)
            text.append(buf, n);
        fclose(file_);
        return text;
    }

  private:
    FILE *file_;
    int saved_;
};

#endif
