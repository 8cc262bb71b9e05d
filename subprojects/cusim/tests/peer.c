/*
 * The parent's side of the IPC tests (peer.h).
 */
#include "peer.h"

#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

extern char **environ;

void peer_start(peer_t *p)
{
    const char *path = getenv("SIMTEST_IPC_PEER");
    if (!path)
        fail_msg("SIMTEST_IPC_PEER is not set (meson sets it to tests/ipc_peer)");
    int in[2], out[2], sv[2];
    assert_int_equal(pipe(in), 0);
    assert_int_equal(pipe(out), 0);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_adddup2(&fa, sv[1], PEER_SOCK_FD);
    posix_spawn_file_actions_addclose(&fa, in[1]);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    char *argv[] = {(char *)path, NULL};
    int rc = posix_spawn(&p->pid, path, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    close(out[1]);
    close(sv[1]);
    p->sock = sv[0];
    if (rc != 0)
        fail_msg("cannot start %s: %s", path, strerror(rc));
    p->to = fdopen(in[1], "w");
    p->from = fdopen(out[0], "r");
    assert_non_null(p->to);
    assert_non_null(p->from);
    setvbuf(p->to, NULL, _IOLBF, 0);
}

const char *peer_cmd(peer_t *p, const char *fmt, ...)
{
    static char line[256];
    va_list ap;
    va_start(ap, fmt);
    vfprintf(p->to, fmt, ap);
    va_end(ap);
    fputc('\n', p->to);
    fflush(p->to);
    if (!fgets(line, sizeof line, p->from))
        fail_msg("the IPC peer (pid %d) did not answer: it died", (int)p->pid);
    line[strcspn(line, "\n")] = 0;
    return line;
}

void peer_hex64(const void *handle64, char hex[129])
{
    const unsigned char *b = handle64;
    for (int i = 0; i < 64; i++)
        snprintf(hex + 2 * i, 3, "%02x", b[i]);
}

const char *peer_open(peer_t *p, const void *handle64, unsigned flags)
{
    char hex[129];
    peer_hex64(handle64, hex);
    return peer_cmd(p, "open %s %x", hex, flags);
}

void peer_send_fd(peer_t *p, int fd)
{
    char byte = 'f', ctl[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {&byte, 1};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof ctl};
    memset(ctl, 0, sizeof ctl);
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
    if (sendmsg(p->sock, &m, 0) != 1)
        fail_msg("cannot pass descriptor %d to the IPC peer: %s", fd, strerror(errno));
}

uintptr_t peer_ptr(const char *answer)
{
    unsigned long long v = 0;
    if (sscanf(answer, "ok %llx", &v) != 1)
        fail_msg("the IPC peer answered \"%s\", expected \"ok PTR\"", answer);
    return (uintptr_t)v;
}

int peer_stop(peer_t *p)
{
    if (p->to) {
        fprintf(p->to, "exit\n");
        fclose(p->to);
    }
    if (p->from)
        fclose(p->from);
    if (p->sock > 0)
        close(p->sock);
    p->sock = -1;
    p->to = p->from = NULL;
    int status = 0;
    if (waitpid(p->pid, &status, 0) != p->pid)
        return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void peer_fill(void *d, size_t n, unsigned seed)
{
    unsigned char *h = malloc(n);
    assert_non_null(h);
    for (size_t i = 0; i < n; i++)
        h[i] = peer_pattern(i, seed);
    assert_int_equal(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice), cudaSuccess);
    free(h);
}

void peer_check(const void *d, size_t n, unsigned seed)
{
    unsigned char *h = malloc(n);
    assert_non_null(h);
    assert_int_equal(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost), cudaSuccess);
    for (size_t i = 0; i < n; i++)
        if (h[i] != peer_pattern(i, seed))
            fail_msg("byte %zu differs", i);
    free(h);
}

void peer_expect(const char *got, const char *want)
{
    if (strcmp(got, want) != 0)
        fail_msg("the peer answered \"%s\", expected \"%s\"", got, want);
}
