/*
 * The local API's socket holds at most FUNCD_LOCALAPI_MAX_CONNS connections
 * of its worker at once: one more waits in the listen backlog (unanswered)
 * until another closes, and connections that come and go, with a request
 * or without one, are each counted out once, so the count never drifts.
 */
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "funcd/funcd.h"
#include "harness.h"
#include "localapi/localapi.h"
#include "util/misc.h"

#define MAX FUNCD_LOCALAPI_MAX_CONNS

static struct event_base *loop;
static char dir[128], sock_path[160];

static int connect_one(void)
{
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", sock_path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sun, sizeof(sun)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void turn(int ms)
{
    struct timeval tv = {0, ms * 1000};
    event_base_loopexit(loop, &tv);
    event_base_dispatch(loop);
}

static void ask(int fd)
{
    static const char q[] = "GET /nothing HTTP/1.1\r\nHost: api\r\n\r\n";
    if (write(fd, q, sizeof(q) - 1) != (ssize_t)sizeof(q) - 1)
        abort();
}

/* 1 when an answer came on fd (it is read), 0 when none yet. */
static int answered(int fd)
{
    char buf[4096];
    ssize_t n = read(fd, buf, sizeof(buf));
    return n > 0 && strncmp(buf, "HTTP/1.1 404", 12) == 0;
}

static int count_answered(const int *fds, int n)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        k += fds[i] >= 0 && answered(fds[i]);
    return k;
}

TEST(connections_beyond_the_cap_wait_until_one_closes)
{
    funcd_store *store = NULL;
    funcd_localapi *api = NULL;
    CHECK(funcd_store_memory_new(&store, 0) == 0);
    CHECK(funcd_localapi_new(&api, loop, store, NULL) == 0);
    const char *none[] = {NULL};
    funcd_localapi_caller caller = {"default", "fn", "r1", none, none, 1};
    funcd_localapi_socket *s = funcd_localapi_open(api, sock_path, &caller);
    CHECK(s);

    int fds[MAX + 8];
    for (unsigned i = 0; i < MAX + 8; i++) {
        fds[i] = connect_one();
        turn(1);
    }
    for (unsigned i = 0; i < MAX + 8; i++)
        if (fds[i] >= 0)
            ask(fds[i]);
    turn(100);
    int first = count_answered(fds, MAX), rest = count_answered(fds + MAX, 8);

    /* Three of the first close: three of the waiting ones are taken. */
    for (int i = 0; i < 3; i++) {
        close(fds[i]);
        fds[i] = -1;
    }
    turn(100);
    int then = count_answered(fds + MAX, 8);

    /* Fifteen more close: the five still waiting are taken, ten places
     * are free. */
    for (int i = 3; i < 18; i++) {
        close(fds[i]);
        fds[i] = -1;
    }
    turn(100);
    int late = count_answered(fds + MAX, 8);

    /* Connections that come and go, half of them asking nothing, are each
     * counted out once: ten places are still free afterwards, not more. */
    for (int i = 0; i < 400; i++) {
        int fd = connect_one();
        if (fd >= 0 && i % 2)
            ask(fd);
        turn(1);
        if (fd >= 0)
            close(fd);
    }
    turn(50);
    int more[11];
    for (int i = 0; i < 11; i++) {
        more[i] = connect_one();
        turn(1);
    }
    for (int i = 0; i < 11; i++)
        if (more[i] >= 0)
            ask(more[i]);
    turn(100);
    int ten = count_answered(more, 10), eleventh = count_answered(more + 10, 1);
    for (int i = 0; i < 11; i++)
        if (more[i] >= 0)
            close(more[i]);

    for (unsigned i = 0; i < MAX + 8; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    funcd_localapi_close(s);
    funcd_localapi_free(api);
    store->free(store);
    CHECK_INT(first, (int)MAX);
    CHECK_INT(rest, 0);
    CHECK_INT(then, 3);
    CHECK_INT(late, 5);
    CHECK_INT(ten, 10);
    CHECK_INT(eleventh, 0);
}

int main(void)
{
    /* As the platform does: evhttp writes answers to clients that may have gone. */
    signal(SIGPIPE, SIG_IGN);
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof(dir), "%s/funcd-localapi-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir) || !(loop = event_base_new()))
        abort();
    snprintf(sock_path, sizeof(sock_path), "%s/api.sock", dir);
    RUN(connections_beyond_the_cap_wait_until_one_closes);
    event_base_free(loop);
    funcd_remove_tree(dir);
    return HARNESS_END();
}
