/*
 * Host paths named by users (util/hostpath.c): hostile spellings resolve to
 * what they name before they are checked against the operator's roots.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "util/hostpath.h"
#include "util/misc.h"

static char top[256];  /* a temp dir: top/root is the allowed root, top/out is beside it */
static char root[300]; /* resolved */

static void path_of(char *out, size_t len, const char *rel)
{
    snprintf(out, len, "%s/%s", top, rel);
}

static int setup(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(top, sizeof(top), "%s/funcd-hostpath-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(top))
        return -1;
    char p[600], q[600];
    static const char *const dirs[] = {"root", "root/fn", "root/fn/sub", "out", "root2"};
    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
        path_of(p, sizeof(p), dirs[i]);
        if (mkdir(p, 0755) != 0)
            return -1;
    }
    /* root/link-out -> ../out (escapes), root/link-in -> fn (stays),
     * root/loop-a <-> root/loop-b, root/etc -> /etc */
    static const char *const links[][2] = {{"root/link-out", "../out"}, {"root/link-in", "fn"},
                                           {"root/loop-a", "loop-b"}, {"root/loop-b", "loop-a"},
                                           {"root/etc", "/etc"}, {"root/dangling", "nowhere"}};
    for (size_t i = 0; i < sizeof(links) / sizeof(links[0]); i++) {
        path_of(p, sizeof(p), links[i][0]);
        if (symlink(links[i][1], p) != 0)
            return -1;
    }
    path_of(q, sizeof(q), "root");
    const char *why;
    return funcd_hostpath_resolve(q, root, sizeof(root), &why);
}

/* The verdict on `path` with `root` allowed; "" when allowed, else why. */
static const char *verdict(const char *path, char *resolved, size_t len)
{
    const char *roots[] = {root, NULL};
    const char *why = NULL;
    if (funcd_hostpath_allowed(path, roots, resolved, len, &why) == 0)
        return "";
    return why ? why : "(no reason)";
}

#define ALLOWED(path, want)                                                                        \
    do {                                                                                           \
        char res_[FUNCD_HOSTPATH_MAX];                                                             \
        const char *v_ = verdict((path), res_, sizeof(res_));                                      \
        if (*v_)                                                                                   \
            FAILF("%s refused (%s), expected it allowed", (path), v_);                             \
        CHECK_STR(res_, (want));                                                                   \
    } while (0)

#define REFUSED(path, reason)                                                                      \
    do {                                                                                           \
        char res_[FUNCD_HOSTPATH_MAX];                                                             \
        const char *v_ = verdict((path), res_, sizeof(res_));                                      \
        if (!*v_)                                                                                  \
            FAILF("%s allowed as %s, expected it refused", (path), res_);                          \
        CHECK_CONTAINS(v_, (reason));                                                              \
    } while (0)

TEST(plain_paths_under_the_root)
{
    char p[600], want[600];
    snprintf(want, sizeof(want), "%s/fn", root);
    snprintf(p, sizeof(p), "%s/fn", root);
    ALLOWED(p, want);
    ALLOWED(root, root);
    snprintf(p, sizeof(p), "%s/", root);
    ALLOWED(p, root);
}

TEST(spellings_resolve_before_the_check)
{
    char p[900], want[600];
    snprintf(want, sizeof(want), "%s/fn", root);
    snprintf(p, sizeof(p), "/%s//fn", root); /* "//" */
    ALLOWED(p, want);
    snprintf(p, sizeof(p), "%s/./fn/.", root); /* "/./" and "/." */
    ALLOWED(p, want);
    snprintf(p, sizeof(p), "%s/fn/sub/..", root); /* ".." that stays inside */
    ALLOWED(p, want);
    snprintf(p, sizeof(p), "%s/link-in", root); /* a symlink that stays inside */
    ALLOWED(p, want);
    snprintf(p, sizeof(p), "/proc/self/root%s/fn", root); /* a magic link to the same view */
    ALLOWED(p, want);
}

TEST(escapes_are_refused)
{
    char p[900];
    snprintf(p, sizeof(p), "%s/..", root);
    REFUSED(p, "outside");
    snprintf(p, sizeof(p), "%s/fn/../../out", root);
    REFUSED(p, "outside");
    snprintf(p, sizeof(p), "%s/link-out", root);
    REFUSED(p, "outside");
    snprintf(p, sizeof(p), "%s/etc", root);
    REFUSED(p, "outside");
    snprintf(p, sizeof(p), "%s/../root2", root); /* a sibling sharing the prefix "root" */
    REFUSED(p, "outside");
    REFUSED("/", "outside");
    REFUSED("//etc", "outside");
    REFUSED("/etc/.", "outside");
    REFUSED("/proc/1/root", ""); /* outside, or not even readable by an unprivileged funcd */
    REFUSED("/proc/self/cwd", "outside");
}

TEST(what_does_not_resolve_is_refused)
{
    char p[900];
    snprintf(p, sizeof(p), "%s/missing", root);
    REFUSED(p, "does not exist");
    snprintf(p, sizeof(p), "%s/dangling", root);
    REFUSED(p, "does not exist");
    snprintf(p, sizeof(p), "%s/loop-a", root);
    REFUSED(p, "loops");
    snprintf(p, sizeof(p), "%s/loop-a/x", root);
    REFUSED(p, "loops");
    REFUSED("", "absolute");
    REFUSED("relative/path", "absolute");
    REFUSED("./x", "absolute");
    REFUSED("~root", "absolute");
}

TEST(weird_strings_are_refused_not_misread)
{
    char p[900];
    snprintf(p, sizeof(p), "%s/fn\n", root); /* a newline is a name like any other */
    REFUSED(p, "does not exist");
    snprintf(p, sizeof(p), "%s/fn ", root);
    REFUSED(p, "does not exist");
    snprintf(p, sizeof(p), "%s/\x01\x7f\xff", root);
    REFUSED(p, "does not exist");
    snprintf(p, sizeof(p), "%s/fn/...", root);
    REFUSED(p, "does not exist");
    snprintf(p, sizeof(p), "%s/fn%%2e%%2e", root); /* no URL decoding here */
    REFUSED(p, "does not exist");
    snprintf(p, sizeof(p), "%s/hello.sh/..", root); /* ".." after a missing name */
    REFUSED(p, "does not exist");
}

TEST(overly_long_paths_are_refused)
{
    size_t n = FUNCD_HOSTPATH_MAX * 4;
    char *p = malloc(n + 1);
    CHECK(p != NULL);
    memset(p, '/', n);
    p[n] = '\0';
    char res[FUNCD_HOSTPATH_MAX];
    const char *roots[] = {"/", NULL}, *why = NULL;
    int rc = funcd_hostpath_allowed(p, roots, res, sizeof(res), &why);
    /* A long run of slashes and "a/../" pairs: still refused by length. */
    for (size_t i = 0; i + 5 <= n; i += 5)
        memcpy(p + i, "/a/..", 5);
    const char *why2 = NULL;
    int rc2 = funcd_hostpath_allowed(p, roots, res, sizeof(res), &why2);
    char name[300];
    memset(name, 'x', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    snprintf(p, n, "%s/%s", root, name); /* a component longer than NAME_MAX */
    const char *why3 = NULL;
    int rc3 = funcd_hostpath_allowed(p, roots, res, sizeof(res), &why3);
    free(p);
    CHECK_INT(rc, -1);
    CHECK_CONTAINS(why, "too long");
    CHECK_INT(rc2, -1);
    CHECK_CONTAINS(why2, "too long");
    CHECK_INT(rc3, -1);
    CHECK_CONTAINS(why3, "too long");
}

TEST(roots_compare_whole_components)
{
    CHECK(funcd_hostpath_under("/srv/fn", "/srv/fn"));
    CHECK(funcd_hostpath_under("/srv/fn/a", "/srv/fn"));
    CHECK(funcd_hostpath_under("/srv/fn/a", "/srv/fn/"));
    CHECK(!funcd_hostpath_under("/srv/fn2", "/srv/fn"));
    CHECK(!funcd_hostpath_under("/srv", "/srv/fn"));
    CHECK(funcd_hostpath_under("/etc", "/"));
    const char *why = NULL;
    char res[FUNCD_HOSTPATH_MAX];
    CHECK_INT(funcd_hostpath_allowed(root, NULL, res, sizeof(res), &why), -1);
    CHECK_CONTAINS(why, "no source root");
}

TEST(git_urls_that_name_host_paths)
{
    CHECK(funcd_git_url_host_path("https://example.com/r.git") == NULL);
    CHECK(funcd_git_url_host_path("http://example.com/r.git") == NULL);
    CHECK(funcd_git_url_host_path("ssh://git@example.com/r.git") == NULL);
    CHECK(funcd_git_url_host_path("git://example.com/r.git") == NULL);
    CHECK(funcd_git_url_host_path("git@example.com:team/r.git") == NULL);
    CHECK_STR(funcd_git_url_host_path("/srv/repo.git"), "/srv/repo.git");
    CHECK_STR(funcd_git_url_host_path("file:///srv/repo.git"), "/srv/repo.git");
    CHECK_STR(funcd_git_url_host_path("file://host/srv/repo.git"), "host/srv/repo.git");
    CHECK_STR(funcd_git_url_host_path("/srv/a@b:c"), "/srv/a@b:c");
    CHECK_STR(funcd_git_url_host_path("FILE:///etc"), "FILE:///etc"); /* not absolute: refused */
}

int main(void)
{
    if (setup() != 0) {
        fprintf(stderr, "cannot set up %s\n", top);
        return 1;
    }
    RUN(plain_paths_under_the_root);
    RUN(spellings_resolve_before_the_check);
    RUN(escapes_are_refused);
    RUN(what_does_not_resolve_is_refused);
    RUN(weird_strings_are_refused_not_misread);
    RUN(overly_long_paths_are_refused);
    RUN(roots_compare_whole_components);
    RUN(git_urls_that_name_host_paths);
    funcd_remove_tree(top);
    return HARNESS_END();
}
