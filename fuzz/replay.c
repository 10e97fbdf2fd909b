/*
 * Replays fuzz inputs through a target's LLVMFuzzerTestOneInput without
 * libFuzzer, so every compiler runs the corpus as an ordinary test.
 *
 *   fuzz-replay-<name> DIR|FILE...
 *
 * A crash is a sanitizer abort; "failed" counts inputs that could not be
 * read. Exits 0 when every input ran, 1 otherwise (or when there were none).
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv);

typedef struct tally {
    int passed, failed;
} tally;

/* Exactly `size` bytes on the heap, so ASan sees any read past the end. */
static int read_file(const char *path, uint8_t **out, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    struct stat st;
    if (fstat(fileno(f), &st) < 0 || st.st_size < 0) {
        fclose(f);
        return -1;
    }
    *size = (size_t)st.st_size;
    *out = malloc(*size ? *size : 1);
    int ok = *out && fread(*out, 1, *size, f) == *size;
    fclose(f);
    if (!ok) {
        free(*out);
        return -1;
    }
    return 0;
}

static void replay_file(const char *path, tally *t)
{
    uint8_t *data;
    size_t size;
    fprintf(stderr, "  %s\n", path);
    if (read_file(path, &data, &size) < 0) {
        fprintf(stderr, "  cannot read %s\n", path);
        t->failed++;
        return;
    }
    LLVMFuzzerTestOneInput(data, size);
    free(data);
    t->passed++;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

static void replay_dir(const char *dir, tally *t)
{
    struct dirent **names;
    int n = scandir(dir, &names, NULL, by_name);
    if (n < 0) {
        fprintf(stderr, "  cannot list %s\n", dir);
        t->failed++;
        return;
    }
    for (int i = 0; i < n; i++) {
        char path[4096];
        struct stat st;
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]->d_name);
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
            replay_file(path, t);
        free(names[i]);
    }
    free(names);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s DIR|FILE...\n", argv[0]);
        return 2;
    }
    if (LLVMFuzzerInitialize)
        LLVMFuzzerInitialize(&argc, &argv);
    tally t = {0, 0};
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode))
            replay_dir(argv[i], &t);
        else
            replay_file(argv[i], &t);
    }
    fprintf(stderr, "%d passed, %d failed\n", t.passed, t.failed);
    if (t.passed == 0 && t.failed == 0)
        fprintf(stderr, "no inputs found\n");
    return t.failed || t.passed == 0 ? 1 : 0;
}
