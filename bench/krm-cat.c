/*
 * krm-cat: the trivial KRM function of bench/fnrunner.sh. It hands the
 * ResourceList back unchanged, so whatever a benchmark measures is the cost
 * of running a function, not of the function's work.
 */
#include <errno.h>
#include <unistd.h>

static int write_all(const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(1, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int main(void)
{
    char buf[65536];
    for (;;) {
        ssize_t n = read(0, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return 1;
        if (n == 0)
            return 0;
        if (write_all(buf, (size_t)n) != 0)
            return 1;
    }
}
