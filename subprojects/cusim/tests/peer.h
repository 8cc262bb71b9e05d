/*
 * The parent's side of the IPC tests: starts tests/ipc_peer (another
 * process, with the environment of this one) and talks to it one line at a
 * time.  peer_pattern is the pattern both sides write and check.
 */
#ifndef SIMTEST_PEER_H
#define SIMTEST_PEER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "cusim/cuda_api.h"

typedef struct peer_s {
    pid_t pid;
    FILE *to, *from;
    int sock; /* a unix socket to the peer (its descriptor PEER_SOCK_FD), for descriptors */
} peer_t;

/* The peer's end of the socket (ipc_peer receives descriptors on it). */
#define PEER_SOCK_FD 3

static inline unsigned char peer_pattern(size_t i, unsigned seed)
{
    return (unsigned char)((i * 2654435761u) >> 13 ^ (i >> 7) ^ seed * 131u);
}

/* Starts the peer named by $SIMTEST_IPC_PEER; fails the test if it cannot. */
void peer_start(peer_t *p);
/* Sends one command (printf format, no newline) and returns the answer
 * line without its newline, in a static buffer. */
const char *peer_cmd(peer_t *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "open" with the handle in hex: the answer. */
const char *peer_open(peer_t *p, const void *handle64, unsigned flags);
/* The peer's pointer from an "ok PTR" answer (fails the test otherwise). */
uintptr_t peer_ptr(const char *answer);
/* Passes descriptor fd to the peer over the socket (SCM_RIGHTS); the
 * peer's next command that takes one receives it. */
void peer_send_fd(peer_t *p, int fd);
/* A 64-byte handle in hex (128 digits and a NUL) for a command. */
void peer_hex64(const void *handle64, char hex[129]);
/* Asks it to exit and waits; returns its exit status (-1: killed). */
int peer_stop(peer_t *p);

/* Writes peer_pattern(., seed) into n bytes of device memory at d. */
void peer_fill(void *d, size_t n, unsigned seed);
/* Fails the test unless the n bytes at d hold peer_pattern(., seed). */
void peer_check(const void *d, size_t n, unsigned seed);
/* Fails the test unless the peer's answer is `want`. */
void peer_expect(const char *got, const char *want);

#endif
