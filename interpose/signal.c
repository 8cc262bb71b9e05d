/*
 * CUCACHE_SNAPSHOT_ON=signal: a snapshot on SIGUSR1.  The handler only
 * writes a byte to a pipe (write is async-signal-safe); a thread of
 * cucache's own, which takes none of the program's signals, reads it and
 * writes the snapshot (hook_snapshot, diag.c) outside any handler.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "diag.h"
#include "env.h"

static int signal_pipe[2] = {-1, -1}; /* [0]: the thread's (blocking); [1]: the handler's (never blocks) */

static void on_sigusr1(int sig)
{
    (void)sig;
    int saved = errno;
    char c = 1;
    (void)!write(signal_pipe[1], &c, 1);
    errno = saved;
}

static void *signal_thread(void *arg)
{
    (void)arg;
    for (;;) {
        char c[16];
        ssize_t n = read(signal_pipe[0], c, sizeof c);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return NULL;
        hook_snapshot(hook_env()->snapshot, -1, "SIGUSR1");
    }
}

int hook_signal_start(char *err, size_t errlen)
{
    if (pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
        snprintf(err, errlen, "CUCACHE_SNAPSHOT_ON=signal: pipe: %s", strerror(errno));
        return -1;
    }
    /* the reading end blocks; the handler's end must never block */
    fcntl(signal_pipe[0], F_SETFL, 0);
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    /* the thread takes no signal of the program's */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int r = pthread_create(&t, &attr, signal_thread, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (r != 0) {
        snprintf(err, errlen, "CUCACHE_SNAPSHOT_ON=signal: cannot start the snapshot thread: %s", strerror(r));
        return -1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigusr1;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    return 0;
}
