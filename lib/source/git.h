/*
 * Git sources: a Function's code fetched from a git repository with libgit2.
 *
 * Cache layout under `cache_dir` (docs/sources.md says the same for users):
 *   repos/<sha256(url) hex>.git   a bare mirror of the URL's branches and tags
 *   repos/<sha256(url) hex>.lock  flock(2)ed while a fetch uses that mirror
 *   trees/<commit>/               the commit's tree, written once, never changed
 *   trees/.tmp-XXXXXX/            a tree being written (or left by a crash:
 *                                 any cleaner may remove those older than a run)
 * A tree only appears under its final name by rename(2) after it is complete
 * and synced, so readers never see half a tree.
 *
 * Refs resolve in this order: "" or NULL = the remote's HEAD; a full name
 * "refs/heads/x" or "refs/tags/x"; the branch refs/heads/<ref>; the tag
 * refs/tags/<ref>; a full or abbreviated (at least 4 hex digits) commit id
 * reachable from a branch or tag. Tags are peeled to their commit.
 *
 * Trees are written from the object database, not through git's checkout:
 * files are 0755 when git records them executable, else 0644; directories
 * 0755; symbolic links are written as links, whatever their target (the
 * sandbox bind-mounts only the tree, so an absolute or escaping link
 * resolves inside the sandbox's own root); submodules become empty
 * directories. No filters (.gitattributes, LFS) are applied.
 *
 * Network URLs reach no loopback, link-local, unspecified or multicast
 * address unless the operator named the host (funcd_git_options): funcd
 * gives libgit2 its own socket stream, which checks every address it
 * connects to (funcd_oci_addr_is_internal, as registry pulls do).
 *
 * Errors: FUNCD_EIO when the URL cannot be reached or read ("git: cannot
 * reach URL: <libgit2's message>", or "...: host H is refused: ..." for an
 * address the rule above closes), FUNCD_ENOTFOUND for an unknown ref or a
 * missing `path`, FUNCD_EINVAL for a bad argument, a `path` that escapes
 * the tree or is not a directory, or a commit over the limits
 * (funcd_git_options), FUNCD_ENOSPC when the disk is full.
 * `err` (if not NULL) and funcd_error_last() get the same message.
 *
 * Threads: every function is blocking (run it off the event loop) and may
 * run concurrently from any number of threads and processes, for the same
 * URL or different ones. Each call brackets itself with git_libgit2_init()
 * and git_libgit2_shutdown(); a component whose threads call these
 * repeatedly should hold funcd_git_init() for as long as those threads live,
 * so libgit2's per-thread state is freed when each thread exits instead of
 * being orphaned by a shutdown that ran while the thread was still alive.
 */
#ifndef FUNCD_SOURCE_GIT_H
#define FUNCD_SOURCE_GIT_H

#include <stddef.h>
#include <stdint.h>

/*
 * What a fetch may do. A zero field means its default; NULL means all
 * defaults. A commit's tree is written only while it stays within the
 * limits (the same as a bundle's, artifact/bundle.h): one that passes them
 * fails with FUNCD_EINVAL naming the limit, and nothing of it is left.
 */
/* Fetches that can be stopped together (funcd_git_cancel_fire): a platform
 * that stops does not wait for a git server that stopped answering. */
typedef struct funcd_git_cancel funcd_git_cancel;
funcd_git_cancel *funcd_git_cancel_new(void);
/* Every connection of a fetch under `c` is shut now, and later ones fail at
 * once. Any thread. */
void funcd_git_cancel_fire(funcd_git_cancel *c);
/* Once no fetch under `c` runs. NULL is fine. */
void funcd_git_cancel_free(funcd_git_cancel *c);

/* A git server silent this long (connecting, or in the middle of a fetch)
 * fails the fetch. */
#define FUNCD_GIT_STALL_MS 30000u
/* A whole fetch (or ls-remote) at most: a server that trickles a byte now
 * and then cannot hold a fetch, and its thread, for ever. */
#define FUNCD_GIT_FETCH_MS 600000u

typedef struct funcd_git_options {
    uint64_t max_entries; /* files, directories, links, submodules; 0: FUNCD_BUNDLE_MAX_ENTRIES */
    uint64_t max_bytes;   /* bytes of files and link targets; 0: FUNCD_BUNDLE_MAX_TOTAL */
    /* Hosts the operator named, "host[:port]" (no port: 443), each list
     * NULL-terminated or NULL: the registries of funcd --insecure-registry
     * and --allowed-registry. A network URL's host is reached at a loopback,
     * link-local, unspecified or multicast address only when named here. */
    const char *const *insecure_hosts;
    const char *const *allowed_hosts;
    unsigned stall_ms;        /* 0: FUNCD_GIT_STALL_MS */
    unsigned fetch_ms;        /* 0: FUNCD_GIT_FETCH_MS */
    funcd_git_cancel *cancel; /* NULL: none */
} funcd_git_options;

typedef struct funcd_git_result {
    char dir[1024];  /* absolute: cache_dir/trees/<commit>[/<path>] */
    char commit[41]; /* 40 lowercase hex digits */
} funcd_git_result;

/* Holds libgit2 initialised (refcounted; pair every init with a shutdown). */
int funcd_git_init(void);
void funcd_git_shutdown(void);

/*
 * Fetches `url` into its mirror, resolves `ref` to a commit and returns the
 * commit's tree (written once) joined with `path` (a relative subdirectory,
 * NULL or "" for the root). When `ref` is a full commit id that this URL's
 * mirror already holds, nothing is fetched and `url` is not contacted; a
 * commit's tree cached from another URL is not enough (that URL may be one
 * the caller could not have named).
 */
int funcd_git_fetch(const char *cache_dir, const char *url, const char *ref, const char *path,
                    funcd_git_result *out, char *err, size_t errlen);
/* The same, with `opts` (NULL: the defaults, as funcd_git_fetch). */
int funcd_git_fetch_opts(const char *cache_dir, const char *url, const char *ref,
                         const char *path, const funcd_git_options *opts, funcd_git_result *out,
                         char *err, size_t errlen);

/*
 * Resolves `ref` (same rules as funcd_git_fetch) to a commit by asking the
 * remote for its refs, without fetching objects: cheap enough to poll. A
 * full commit id is returned as is; an abbreviated one cannot be resolved
 * this way unless it prefixes an advertised commit (FUNCD_ENOTFOUND). Of
 * `opts` (may be NULL) only the named hosts count.
 */
int funcd_git_ls_remote(const char *url, const char *ref, const funcd_git_options *opts,
                        char commit[41], char *err, size_t errlen);

#endif
