/*
 * The function runner's authentication and Unix socket (issue 11, finding
 * 10), spoken to by `funcdctl fn eval`'s gRPC client: with a runner token
 * file, EvaluateFunction without a token, or with a wrong one, is
 * UNAUTHENTICATED (16) while a listed token gets OK and the health check
 * stays open; `unix:/path` listens on a 0600 socket, which a client reaches
 * and which is gone after shutdown. Each case embeds its own platform.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "funcd/funcd.h"
#include "grpc_client.h"
#include "harness.h"
#include "util/buf.h"
#include "util/misc.h"

#define IMG "example.com/fns/echo:v1"
#define EVALUATE "/evaluator.FunctionEvaluator/EvaluateFunction"
#define RL "{\"apiVersion\":\"config.kubernetes.io/v1\",\"kind\":\"ResourceList\",\"items\":[]}"

static char dir[] = "/tmp/funcd-grpc-auth-XXXXXX";

static int echo(const char *in, size_t in_len, char **out, size_t *out_len, char **log,
                size_t *log_len, void *payload)
{
    *out = funcd_strndup(in, in_len);
    *out_len = in_len;
    return *out ? 0 : 1;
}

static void quiet(funcd_log_level level, const char *message, void *payload) {}

static int evaluate(const char *addr, const char *token, ctl_grpc_result *res)
{
    funcd_buf req = FUNCD_BUF_INIT;
    ctl_pb_put_bytes(&req, 1, RL, strlen(RL));
    ctl_pb_put_bytes(&req, 2, IMG, strlen(IMG));
    ctl_grpc_call call = {addr, EVALUATE, (const uint8_t *)req.data, req.len, 10000, 1 << 20,
                          token};
    int status = ctl_grpc_unary(&call, res);
    funcd_buf_free(&req);
    return status;
}

static int has_rl(const ctl_grpc_result *res)
{
    return res->response.data && memmem(res->response.data, res->response.len, "ResourceList",
                                        12) != NULL;
}

TEST(runner_token_is_required)
{
    char tokens[128];
    snprintf(tokens, sizeof(tokens), "%s/runner-tokens", dir);
    int fd = open(tokens, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    static const char lines[] = "# the runner's\nrunner-tok developer default\n";
    ssize_t n = write(fd, lines, sizeof(lines) - 1);
    close(fd);
    CHECK_INT(n, (ssize_t)sizeof(lines) - 1);
    funcd_platform *p = NULL;
    if (funcd_platform_new(&p, funcd_in_memory(), funcd_with_fn_runner_token_file(tokens),
                           funcd_with_builtin(IMG, echo, NULL),
                           funcd_with_logger(quiet, FUNCD_LOG_ERROR, NULL)) < 0)
        FAILF("funcd_platform_new: %s", funcd_error_last()->message);
    int started = funcd_platform_start(p) == 0;
    const char *addr = funcd_platform_fn_runner_addr(p);
    ctl_grpc_result none = CTL_GRPC_RESULT_INIT, wrong = CTL_GRPC_RESULT_INIT,
                    good = CTL_GRPC_RESULT_INIT, health = CTL_GRPC_RESULT_INIT,
                    api_token = CTL_GRPC_RESULT_INIT;
    int s_none = evaluate(addr, NULL, &none);
    int s_wrong = evaluate(addr, "runner-tokX", &wrong);
    int s_api = evaluate(addr, "funcd-dev-token", &api_token); /* the API's, not the runner's */
    int s_good = evaluate(addr, "runner-tok", &good);
    ctl_grpc_call hc = {addr, "/grpc.health.v1.Health/Check", (const uint8_t *)"", 0, 5000, 1024};
    int s_health = ctl_grpc_unary(&hc, &health);
    int good_rl = has_rl(&good), none_rl = has_rl(&none);
    char message[512];
    snprintf(message, sizeof(message), "%s", none.message.data ? none.message.data : "");
    ctl_grpc_result_free(&none);
    ctl_grpc_result_free(&wrong);
    ctl_grpc_result_free(&good);
    ctl_grpc_result_free(&health);
    ctl_grpc_result_free(&api_token);
    funcd_platform_free(p);
    CHECK(started);
    CHECK_INT(s_none, 16);
    CHECK(!none_rl);
    CHECK_CONTAINS(message, "bearer token");
    CHECK_INT(s_wrong, 16);
    CHECK_INT(s_api, 16);
    CHECK_INT(s_good, 0);
    CHECK(good_rl);
    CHECK_INT(s_health, 0);
}

TEST(runner_token_file_readable_by_others_is_refused)
{
    char tokens[128];
    snprintf(tokens, sizeof(tokens), "%s/open-tokens", dir);
    int fd = open(tokens, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    ssize_t n = write(fd, "t admin\n", 8);
    int mode_ok = fchmod(fd, 0644) == 0;
    close(fd);
    CHECK(n == 8 && mode_ok);
    funcd_platform *p = (funcd_platform *)1;
    int rc = funcd_platform_new(&p, funcd_in_memory(), funcd_with_fn_runner_token_file(tokens),
                                funcd_with_logger(quiet, FUNCD_LOG_ERROR, NULL));
    CHECK_INT(rc, FUNCD_EINVAL);
    CHECK(p == NULL);
    CHECK_CONTAINS(funcd_error_last()->message, "chmod 600");
}

TEST(runner_listens_on_a_unix_socket)
{
    char sock[128], addr[140];
    snprintf(sock, sizeof(sock), "%s/fn.sock", dir);
    snprintf(addr, sizeof(addr), "unix:%s", sock);
    funcd_platform *p = NULL;
    if (funcd_platform_new(&p, funcd_in_memory(), funcd_with_fn_runner_addr(addr),
                           funcd_with_builtin(IMG, echo, NULL),
                           funcd_with_logger(quiet, FUNCD_LOG_ERROR, NULL)) < 0)
        FAILF("funcd_platform_new: %s", funcd_error_last()->message);
    int started = funcd_platform_start(p) == 0;
    char bound[160];
    snprintf(bound, sizeof(bound), "%s", funcd_platform_fn_runner_addr(p));
    struct stat st;
    int is_sock = stat(sock, &st) == 0 && S_ISSOCK(st.st_mode);
    unsigned mode = is_sock ? (unsigned)(st.st_mode & 0777) : 0;
    ctl_grpc_result res = CTL_GRPC_RESULT_INIT;
    int status = evaluate(addr, NULL, &res);
    int rl = has_rl(&res);
    ctl_grpc_result_free(&res);
    funcd_platform_free(p);
    int gone = stat(sock, &st) != 0 && errno == ENOENT;
    CHECK(started);
    CHECK_STR(bound, addr);
    CHECK(is_sock);
    CHECK_INT(mode, 0600);
    CHECK_INT(status, 0);
    CHECK(rl);
    CHECK(gone);

    /* a regular file in the way is not replaced */
    int fd = open(sock, O_WRONLY | O_CREAT, 0600);
    close(fd);
    p = (funcd_platform *)1;
    CHECK(funcd_platform_new(&p, funcd_in_memory(), funcd_with_fn_runner_addr(addr),
                             funcd_with_logger(quiet, FUNCD_LOG_ERROR, NULL)) < 0);
    CHECK(p == NULL);
    CHECK_CONTAINS(funcd_error_last()->message, "not a socket");
    unlink(sock);
}

int main(void)
{
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(runner_token_is_required);
    RUN(runner_token_file_readable_by_others_is_refused);
    RUN(runner_listens_on_a_unix_socket);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", dir);
    return HARNESS_END();
}
