/*
 * A full disk (issue 6): funcd's data directory on a small tmpfs this test
 * mounts. Writes until the disk is full must end in 507 InsufficientStorage
 * (a JSON Status), never a 500 or a crash; everything acknowledged before
 * stays readable, also after kill -9 and a restart; once there is room
 * again (the tmpfs remounted bigger), writes succeed.
 *
 * Needs CAP_SYS_ADMIN for mount(2): skipped (77) without it.
 */
#include <errno.h>
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include "../e2e/client.h"
#include "../e2e/env.h"
#include "../harness.h"
#include "daemon.h"

#define SMALL "size=1m,mode=0700"
#define BIG "size=64m,mode=0700"
#define PAYLOAD 12000 /* bytes of secret data per object */
#define MAX_OBJECTS 4000

typedef struct full_disk {
    char dir[256], data[300], log[300];
    int mounted;
    dd_daemon d;
    e2e_http *h;
    e2e_resp r;
    char *payload;
    int stored; /* objects big-0 .. big-(stored-1) were acknowledged */
} full_disk;

static char *secret_body(const full_disk *f, const char *name)
{
    char *s = NULL;
    int n = asprintf(&s,
                     "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Secret\",\"metadata\":{\"name\":"
                     "\"%s\",\"annotations\":{\"content\":\"%s\"}},\"type\":\"Opaque\","
                     "\"data\":{\"v\":\"%s\"}}",
                     name, name, f->payload);
    return n < 0 ? NULL : s;
}

static long put_secret(full_disk *f, const char *name)
{
    char path[160];
    snprintf(path, sizeof(path), DD_NS "/secrets/%s", name);
    char *body = secret_body(f, name);
    long st = e2e_http_do(f->h, "PUT", path, DD_TOKEN, body ? body : "", &f->r);
    free(body);
    return st;
}

static int start(full_disk *f)
{
    const char *args[32];
    dd_default_args(args, 32, "--data-dir", f->data, NULL);
    if (dd_start(&f->d, f->log, args) < 0)
        return -1;
    e2e_http_free(f->h);
    return (f->h = e2e_http_new(f->d.cp)) ? 0 : -1;
}

/* Every acknowledged object is there with its content; -1 names the first
 * one that is not. */
static int all_readable(full_disk *f)
{
    for (int i = 0; i < f->stored; i++) {
        char path[160], name[32];
        snprintf(name, sizeof(name), "big-%d", i);
        snprintf(path, sizeof(path), DD_NS "/secrets/%s", name);
        long st = e2e_http_do(f->h, "GET", path, DD_TOKEN, NULL, &f->r);
        const char *c = jstr(f->r.json, "metadata.annotations.content");
        const char *v = jstr(f->r.json, "data.v");
        if (st != 200 || !c || strcmp(c, name) != 0 || !v || strcmp(v, f->payload) != 0) {
            fprintf(stderr, "  %s: HTTP %ld %.200s\n", name, st, f->r.body);
            return -1;
        }
    }
    return 0;
}

static void fill_and_check(full_disk *f)
{
    long st = 0;
    for (; f->stored < MAX_OBJECTS; f->stored++) {
        char name[32];
        snprintf(name, sizeof(name), "big-%d", f->stored);
        if ((st = put_secret(f, name)) != 201)
            break;
    }
    fprintf(stderr, "  %d objects stored before the disk was full\n", f->stored);
    CHECK(f->stored > 0 && f->stored < MAX_OBJECTS);
    const char *why = status_problem(&f->r, 507, "InsufficientStorage", NULL);
    if (why)
        FAILF("a write to a full disk: %s; HTTP %ld: %.300s", why, st, f->r.body);
    fprintf(stderr, "  the answer: %.400s\n", f->r.body);
    CHECK_INT(put_secret(f, "one-more"), 507);
    CHECK_INT(e2e_http_do(f->h, "GET", "/healthz", NULL, NULL, &f->r), 200);
    CHECK_INT(e2e_http_do(f->h, "GET", DD_NS "/secrets", DD_TOKEN, NULL, &f->r), 200);
    CHECK(all_readable(f) == 0);
}

static void room_again_and_restart(full_disk *f)
{
    CHECK(mount(NULL, f->dir, NULL, MS_REMOUNT, BIG) == 0);
    CHECK_INT(put_secret(f, "after-remount"), 201);
    /* And nothing of it is lost across kill -9 either. */
    dd_kill9(&f->d);
    CHECK(start(f) == 0);
    CHECK(all_readable(f) == 0);
    CHECK_INT(e2e_http_do(f->h, "GET", DD_NS "/secrets/after-remount", DD_TOKEN, NULL, &f->r),
              200);
    CHECK_INT(put_secret(f, "after-restart"), 201);
}

TEST(full_disk_gives_507_and_loses_nothing)
{
    full_disk f = {.r = E2E_RESP_INIT};
    if (dd_tempdir(f.dir, sizeof(f.dir), "enospc") < 0)
        FAILF("mkdtemp: %s", strerror(errno));
    snprintf(f.data, sizeof(f.data), "%s/data", f.dir);
    if (mount("tmpfs", f.dir, "tmpfs", 0, SMALL) != 0) {
        int e = errno;
        rmdir(f.dir);
        if (e == EPERM || e == EACCES) {
            fprintf(stderr, "SKIP: mount(tmpfs) not permitted here\n");
            exit(77);
        }
        FAILF("mount tmpfs on %s: %s", f.dir, strerror(e));
    }
    f.mounted = 1;
    /* The log stays off the small disk: it must not be what fills it. */
    snprintf(f.log, sizeof(f.log), "%s.log", f.dir);
    f.payload = malloc(PAYLOAD + 1);
    if (f.payload) {
        for (int i = 0; i < PAYLOAD; i++)
            f.payload[i] = "ABCDEFGHabcdefgh0123456789+/"[i % 28];
        f.payload[PAYLOAD] = '\0';
    }
    if (f.payload && start(&f) == 0) {
        fill_and_check(&f);
        if (!harness_failed_now)
            room_again_and_restart(&f);
        if (harness_failed_now)
            dd_dump_log(&f.d);
    } else {
        harness_failed_now = 1;
    }
    dd_kill9(&f.d);
    e2e_http_free(f.h);
    e2e_resp_free(&f.r);
    free(f.payload);
    if (f.mounted)
        umount2(f.dir, MNT_DETACH);
    rmdir(f.dir);
    unlink(f.log);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    e2e_client_global_init();
    RUN(full_disk_gives_507_and_loses_nothing);
    e2e_client_global_cleanup();
    return HARNESS_END();
}
