/*
 * A table of live handles (contexts, streams, events, pools, graphs), so that
 * a handle the program passes is validated without dereferencing it: a
 * destroyed or garbage handle is an error, never a crash.  Call with
 * sim.lock held.
 */
#ifndef CUCACHE_SIM_HANDLES_H
#define CUCACHE_SIM_HANDLES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

void handle_add(const void *h, uint32_t magic);
void handle_del(const void *h);
/* True when h is live and of the given kind. */
bool handle_is(const void *h, uint32_t magic);
/* handle_is, and then h is no longer live (a destruction's check). */
bool handle_take(const void *h, uint32_t magic);
/* Live handles of a kind, in a malloc'ed array the caller frees. */
size_t handle_list(uint32_t magic, void ***out);

#endif
