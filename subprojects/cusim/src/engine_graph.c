/*
 * The simulated device's engine: graphs as DAGs of nodes, their instances
 * and launches, and the device's graph memory pool.  See engine.h for the
 * model; the API is driver_graph.c.
 *
 * A launch runs an instance's nodes on *lanes*, streams of the instance's
 * own (non-blocking, in the launch stream's context), in an order where
 * each node follows its dependencies: a node goes on the lane whose last
 * operation is one of its dependencies, or on a lane this launch has not
 * used, or on a new lane, and waits for its other dependencies as a
 * cuStreamWaitEvent would.  Unordered branches thus run on different lanes
 * with unordered vector clocks (the race detector sees them as concurrent);
 * an edge is a dependency and a clock join.  The launch stream gets one
 * operation before the graph (the roots follow it) and one after it that
 * follows every node without dependents, so the stream's earlier work is
 * before the graph and its later work after the whole graph; a launch also
 * follows the instance's previous launch, as in CUDA.  A child graph and
 * a conditional node's chosen body run the same way, as one node: after
 * the node's dependencies, before its dependents.
 *
 * Graph memory: an allocation node gets its address when it is made
 * (fixed for the graph's life, as in CUDA); pages are charged to the device
 * when an instance holding it is uploaded or launched (the pool's reserved
 * bytes, which cuMemGetInfo and the shared device see) and stay reserved
 * until cuDeviceGraphMemTrim finds them unused; the allocation is in use
 * (the pool's used bytes) from the launch that runs its allocation node
 * until a free node, cuMemFree or cuMemFreeAsync frees it.  Both are
 * accounted when the launch is queued, not when its nodes run.
 */
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "handles.h"

static void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (!p)
        abort();
    return p;
}

/* ------------------------------------------------------------------------
 * Graphs and nodes
 * ---------------------------------------------------------------------- */

struct CUgraph_st *sim_graph_new(struct CUctx_st *ctx)
{
    struct CUgraph_st *g = sim_xcalloc(1, sizeof *g);
    g->magic = SIM_MAGIC_GRAPH;
    g->ctx = ctx;
    return g;
}

struct CUgraphNode_st *sim_graph_node_add(struct CUgraph_st *g, CUgraphNodeType type,
                                          struct CUgraphNode_st *const *deps, size_t n)
{
    struct CUgraphNode_st *node = sim_xcalloc(1, sizeof *node);
    node->magic = SIM_MAGIC_NODE;
    node->graph = g;
    node->type = type;
    node->ctx = g->ctx;
    node->deps = sim_xcalloc(n ? n : 1, sizeof *node->deps);
    if (n)
        memcpy(node->deps, deps, n * sizeof *deps);
    node->ndeps = n;
    g->nodes = xrealloc(g->nodes, (g->nnodes + 1) * sizeof *g->nodes);
    g->nodes[g->nnodes++] = node;
    if (type == CU_GRAPH_NODE_TYPE_MEM_ALLOC || type == CU_GRAPH_NODE_TYPE_MEM_FREE)
        g->has_mem = true;
    handle_add(node, SIM_MAGIC_NODE);
    return node;
}

static void gblock_unref(sim_gblock_t *b);

void sim_graph_node_free(struct CUgraphNode_st *node)
{
    handle_del(node);
    if (node->op)
        sim_op_free(node->op);
    if (node->child)
        sim_graph_free(node->child);
    for (unsigned b = 0; b < node->nbodies; b++)
        sim_graph_free(node->bodies[b]);
    free(node->bodies);
    if (node->block)
        gblock_unref(node->block);
    free(node->deps);
    node->magic = SIM_MAGIC_DEAD;
    sim_handle_release(node);
}

void sim_graph_free(struct CUgraph_st *g)
{
    for (size_t i = 0; i < g->nnodes; i++)
        sim_graph_node_free(g->nodes[i]);
    free(g->nodes);
    while (g->conds) {
        sim_cond_t *c = g->conds;
        g->conds = c->next;
        free(c);
    }
    if (g->exec && handle_is(g->exec, SIM_MAGIC_EXEC))
        g->exec->graph = NULL;
    handle_del(g);
    g->magic = SIM_MAGIC_DEAD;
    sim_handle_release(g);
}

/* The node types of the operations a capture records. */
static CUgraphNodeType capture_type(const sim_op_t *op)
{
    switch (op->kind) {
    case SIM_OP_COPY:
        return CU_GRAPH_NODE_TYPE_MEMCPY;
    case SIM_OP_SET:
        return CU_GRAPH_NODE_TYPE_MEMSET;
    case SIM_OP_HOSTFN:
        return op->host_fn ? CU_GRAPH_NODE_TYPE_HOST : CU_GRAPH_NODE_TYPE_KERNEL;
    case SIM_OP_RECORD:
        return CU_GRAPH_NODE_TYPE_EVENT_RECORD;
    case SIM_OP_WAIT:
    case SIM_OP_FREE:
        return CU_GRAPH_NODE_TYPE_EMPTY;
    case SIM_OP_CALLBACK:
    case SIM_OP_FAULT:
    case SIM_OP_KERNEL:
        break;
    }
    return CU_GRAPH_NODE_TYPE_KERNEL;
}

void sim_graph_capture_deps(struct CUstream_st *s, struct CUgraphNode_st *const *nodes, size_t n, bool add)
{
    if (!add)
        s->ncap_deps = 0;
    s->cap_deps = xrealloc(s->cap_deps, (s->ncap_deps + n) * sizeof *s->cap_deps);
    for (size_t i = 0; i < n; i++) {
        bool dup = false;
        for (size_t j = 0; j < s->ncap_deps && !dup; j++)
            dup = s->cap_deps[j] == nodes[i];
        if (!dup)
            s->cap_deps[s->ncap_deps++] = nodes[i];
    }
    if (!s->ncap_deps && !add) {
        free(s->cap_deps);
        s->cap_deps = NULL;
    }
}

void sim_graph_capture_op(struct CUstream_st *s, sim_op_t *op)
{
    struct CUgraphNode_st *node = sim_graph_node_add(s->capture->graph, capture_type(op), s->cap_deps, s->ncap_deps);
    node->ctx = s->ctx;
    if (op->kind == SIM_OP_RECORD) {
        node->event = op->event;
        op->event->captured = s->capture;
        op->event->cap_node = node;
        sim_op_free(op);
    } else {
        node->op = sim_op_clone(op);
        sim_op_free(op);
    }
    sim_graph_capture_deps(s, &node, 1, false);
}

/* ------------------------------------------------------------------------
 * Graph memory
 * ---------------------------------------------------------------------- */

struct sim_gblock_s {
    sim_device_t *dev;
    uintptr_t addr;
    size_t size, len;    /* requested; taken (whole pages) */
    unsigned refs;       /* the allocation node and the instances holding it */
    bool mapped;         /* len bytes of the pool's reserved bytes are bound to it */
    bool live;           /* allocated by a launch and not freed since */
    bool freed_in_graph; /* its graph has a free node for it */
    int end_slot;        /* the end of the last launch that used it: pending until then */
    uint64_t end_seq;
    sim_gblock_t *next;
};

static sim_gblock_t *gblocks;

static void pool_note(sim_device_t *d)
{
    if (d->graph_mem.reserved > d->graph_mem.reserved_high)
        d->graph_mem.reserved_high = d->graph_mem.reserved;
    if (d->graph_mem.used > d->graph_mem.used_high)
        d->graph_mem.used_high = d->graph_mem.used;
}

CUresult sim_gblock_new(struct CUctx_st *ctx, size_t size, sim_gblock_t **out)
{
    sim_device_t *d = ctx->dev;
    if (size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (size > d->capacity)
        return CUDA_ERROR_OUT_OF_MEMORY;
    size_t len = (size + SIM_PAGE - 1) / SIM_PAGE * SIM_PAGE;
    uintptr_t addr = sim_dev_addr_take(d, len);
    if (!addr)
        return CUDA_ERROR_OUT_OF_MEMORY;
    sim_alloc_t *a = sim_alloc_new(addr, size, SIM_ALLOC_GRAPH, d->ordinal);
    a->reserved = len;
    sim_gblock_t *b = sim_xcalloc(1, sizeof *b);
    *b = (sim_gblock_t){.dev = d, .addr = addr, .size = size, .len = len, .refs = 1, .next = gblocks};
    gblocks = b;
    *out = b;
    return CUDA_SUCCESS;
}

sim_gblock_t *sim_gblock_at(uintptr_t addr)
{
    for (sim_gblock_t *b = gblocks; b; b = b->next)
        if (b->addr == addr)
            return b;
    return NULL;
}

uintptr_t sim_gblock_addr(const sim_gblock_t *b)
{
    return b->addr;
}

bool sim_gblock_freed_in_graph(const sim_gblock_t *b)
{
    return b->freed_in_graph;
}

void sim_gblock_mark_freed(sim_gblock_t *b)
{
    b->freed_in_graph = true;
}

void sim_gblock_retain(sim_gblock_t *b)
{
    b->refs++;
}

/* The allocation's memory goes back to the pool (still reserved) and its
 * addresses to the device once nothing holds it. */
static void gblock_maybe_release(sim_gblock_t *b)
{
    if (b->refs || b->live)
        return;
    if (b->mapped)
        b->dev->graph_mem.mapped -= b->len;
    race_forget(b->addr, b->addr + b->len);
    sim_alloc_t *a = sim_alloc_exact(b->addr);
    if (a)
        sim_alloc_remove(a);
    sim_dev_addr_give(b->dev, b->addr, b->len);
    for (sim_gblock_t **p = &gblocks; *p; p = &(*p)->next)
        if (*p == b) {
            *p = b->next;
            break;
        }
    free(b);
}

static void gblock_unref(sim_gblock_t *b)
{
    b->refs--;
    gblock_maybe_release(b);
}

static void gblock_set_live(sim_gblock_t *b, bool live)
{
    if (b->live == live)
        return;
    b->live = live;
    if (live)
        b->dev->graph_mem.used += b->len;
    else
        b->dev->graph_mem.used -= b->len;
    pool_note(b->dev);
}

CUresult sim_gblock_free_outside(sim_gblock_t *b)
{
    if (!b->live || b->freed_in_graph)
        return CUDA_ERROR_INVALID_VALUE;
    gblock_set_live(b, false);
    gblock_maybe_release(b);
    return CUDA_SUCCESS;
}

static bool gblock_pending(const sim_gblock_t *b)
{
    return b->end_seq && sim.completed[b->end_slot] < b->end_seq;
}

void sim_graph_mem_trim(sim_device_t *d)
{
    for (sim_gblock_t *b = gblocks; b; b = b->next)
        if (b->dev == d && b->mapped && !b->live && !gblock_pending(b)) {
            b->mapped = false;
            d->graph_mem.mapped -= b->len;
        }
    size_t spare = d->graph_mem.reserved - d->graph_mem.mapped;
    sim_dev_uncharge(d, spare);
    d->graph_mem.reserved -= spare;
}

/* Binds reserved memory to every allocation of x that has none, charging
 * the device for what the pool lacks (after a trim, once). */
static CUresult exec_map(struct CUgraphExec_st *x)
{
    sim_device_t *d = x->ctx->dev;
    size_t need = 0;
    for (size_t i = 0; i < x->nnodes; i++)
        if (x->nodes[i].type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && !x->nodes[i].block->mapped)
            need += x->nodes[i].block->len;
    if (!need)
        return CUDA_SUCCESS;
    for (int attempt = 0;; attempt++) {
        size_t idle = d->graph_mem.reserved - d->graph_mem.mapped;
        size_t extra = need > idle ? need - idle : 0;
        if (!extra || sim_dev_charge(d, extra)) {
            d->graph_mem.reserved += extra;
            break;
        }
        if (attempt)
            return CUDA_ERROR_OUT_OF_MEMORY;
        sim_graph_mem_trim(d);
    }
    for (size_t i = 0; i < x->nnodes; i++)
        if (x->nodes[i].type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && !x->nodes[i].block->mapped)
            x->nodes[i].block->mapped = true;
    d->graph_mem.mapped += need;
    pool_note(d);
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------
 * Instances
 * ---------------------------------------------------------------------- */

static size_t node_index(const struct CUgraph_st *g, const struct CUgraphNode_st *node)
{
    for (size_t i = 0; i < g->nnodes; i++)
        if (g->nodes[i] == node)
            return i;
    return SIZE_MAX;
}

static CUresult exec_build(struct CUgraph_st *g, struct CUgraphExec_st *x, bool body,
                           struct CUgraphNode_st **err_node);

static void xnodes_free(struct CUgraphExec_st *x)
{
    for (size_t i = 0; i < x->nnodes; i++) {
        sim_xnode_t *xn = &x->nodes[i];
        if (xn->op)
            sim_op_free(xn->op);
        if (xn->child)
            sim_exec_free(xn->child);
        for (unsigned b = 0; b < xn->nbodies; b++)
            if (xn->bodies[b])
                sim_exec_free(xn->bodies[b]);
        free(xn->bodies);
        if (xn->block)
            gblock_unref(xn->block);
        free(xn->deps);
    }
    free(x->nodes);
    x->nodes = NULL;
    x->nnodes = 0;
}

void sim_exec_free(struct CUgraphExec_st *x)
{
    xnodes_free(x);
    for (size_t i = 0; i < x->nlanes; i++)
        sim_stream_destroy(x->lanes[i]);
    free(x->lanes);
    vc_release(x->end_vc);
    if (x->graph && x->graph->exec == x)
        x->graph->exec = NULL;
    x->magic = SIM_MAGIC_DEAD;
    sim_handle_release(x);
}

/* The node kinds a conditional body may hold, at any depth (cuda.h's
 * CUDA_CONDITIONAL_NODE_PARAMS). */
static bool body_kind_ok(CUgraphNodeType type)
{
    return type == CU_GRAPH_NODE_TYPE_KERNEL || type == CU_GRAPH_NODE_TYPE_EMPTY ||
           type == CU_GRAPH_NODE_TYPE_GRAPH || type == CU_GRAPH_NODE_TYPE_MEMSET ||
           type == CU_GRAPH_NODE_TYPE_MEMCPY || type == CU_GRAPH_NODE_TYPE_CONDITIONAL;
}

/* A sub-instance of x (a child graph's or a conditional body's). */
static CUresult exec_sub(struct CUgraphExec_st *x, struct CUgraph_st *g, bool body, struct CUgraphExec_st **out,
                         struct CUgraphNode_st **err_node)
{
    *out = sim_xcalloc(1, sizeof **out);
    (*out)->magic = SIM_MAGIC_EXEC;
    (*out)->ctx = x->ctx;
    return exec_build(g, *out, body, err_node);
}

/* x's nodes from g's, ordered so that each follows its dependencies
 * (Kahn's algorithm); a cycle, or in a conditional body (body) a node of a
 * kind bodies may not hold, is CUDA_ERROR_INVALID_VALUE. */
static CUresult exec_build(struct CUgraph_st *g, struct CUgraphExec_st *x, bool body,
                           struct CUgraphNode_st **err_node)
{
    size_t n = g->nnodes;
    size_t *order = sim_xcalloc(n ? n : 1, sizeof *order);
    size_t *pos = sim_xcalloc(n ? n : 1, sizeof *pos); /* gindex -> position */
    bool *placed = sim_xcalloc(n ? n : 1, sizeof *placed);
    size_t done = 0;
    while (done < n) {
        size_t before = done;
        for (size_t i = 0; i < n; i++) {
            if (placed[i])
                continue;
            bool ready = true;
            for (size_t d = 0; d < g->nodes[i]->ndeps && ready; d++)
                ready = placed[node_index(g, g->nodes[i]->deps[d])];
            if (ready) {
                placed[i] = true;
                pos[i] = done;
                order[done++] = i;
            }
        }
        if (done == before)
            break;
    }
    CUresult r = done == n ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    x->nodes = sim_xcalloc(n ? n : 1, sizeof *x->nodes);
    for (size_t k = 0; k < done && r == CUDA_SUCCESS; k++) {
        struct CUgraphNode_st *node = g->nodes[order[k]];
        sim_xnode_t *xn = &x->nodes[k];
        x->nnodes = k + 1;
        xn->origin = node;
        xn->gindex = order[k];
        xn->type = node->type;
        xn->enabled = true;
        xn->op = node->op ? sim_op_clone(node->op) : NULL;
        xn->event = node->event;
        if (node->block) {
            xn->block = node->block;
            sim_gblock_retain(node->block);
        }
        xn->deps = sim_xcalloc(node->ndeps ? node->ndeps : 1, sizeof *xn->deps);
        xn->ndeps = node->ndeps;
        for (size_t d = 0; d < node->ndeps; d++)
            xn->deps[d] = pos[node_index(g, node->deps[d])];
        if (body && !body_kind_ok(node->type)) {
            r = CUDA_ERROR_INVALID_VALUE;
            if (err_node && !*err_node)
                *err_node = node;
        }
        if (node->child && r == CUDA_SUCCESS)
            r = exec_sub(x, node->child, body, &xn->child, err_node);
        if (node->nbodies) {
            xn->cond_type = node->cond_type;
            xn->cond_value = node->cond->value;
            xn->bodies = sim_xcalloc(node->nbodies, sizeof *xn->bodies);
            xn->nbodies = node->nbodies;
            for (unsigned b = 0; b < node->nbodies && r == CUDA_SUCCESS; b++)
                r = exec_sub(x, node->bodies[b], true, &xn->bodies[b], err_node);
        }
    }
    if (r != CUDA_SUCCESS && err_node && !*err_node && done < n)
        for (size_t i = 0; i < n && !*err_node; i++)
            if (!placed[i])
                *err_node = g->nodes[i];
    /* the free nodes of allocations this graph makes */
    for (size_t k = 0; k < x->nnodes; k++)
        if (x->nodes[k].type == CU_GRAPH_NODE_TYPE_MEM_FREE)
            for (size_t j = 0; j < x->nnodes && !x->nodes[k].own; j++)
                x->nodes[k].own =
                    x->nodes[j].type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && x->nodes[j].block == x->nodes[k].block;
    free(order);
    free(pos);
    free(placed);
    return r;
}

CUresult sim_graph_instantiate(struct CUgraph_st *g, unsigned long long flags, struct CUgraphExec_st **out,
                               struct CUgraphNode_st **err_node)
{
    bool single = g->has_mem || g->has_cond;
    if (single && g->exec && handle_is(g->exec, SIM_MAGIC_EXEC))
        return CUDA_ERROR_INVALID_VALUE; /* one instance at a time */
    struct CUgraphExec_st *x = sim_xcalloc(1, sizeof *x);
    x->magic = SIM_MAGIC_EXEC;
    x->ctx = g->ctx;
    x->graph = g;
    x->flags = flags;
    CUresult r = exec_build(g, x, false, err_node);
    if (r != CUDA_SUCCESS) {
        x->graph = NULL;
        sim_exec_free(x);
        return r;
    }
    if (single)
        g->exec = x;
    handle_add(x, SIM_MAGIC_EXEC);
    *out = x;
    return CUDA_SUCCESS;
}

CUresult sim_exec_upload(struct CUgraphExec_st *x)
{
    return exec_map(x);
}

/* ------------------------------------------------------------------------
 * Launch
 * ---------------------------------------------------------------------- */

/* A queued operation: its stream position and clock (retained). */
typedef struct gpos_s {
    int slot;
    uint64_t seq;
    sim_vc_t *vc;
} gpos_t;

typedef struct launch_s {
    struct CUgraphExec_st *top; /* owns the lanes */
    bool *used;                 /* lanes this launch has put work on */
    CUresult r;
} launch_t;

static gpos_t pos_of(const struct CUstream_st *s)
{
    return (gpos_t){s->slot, s->last_seq, vc_retain(s->vc)};
}

static void op_after(sim_op_t *op, const gpos_t *p)
{
    if (!p->seq)
        return;
    sim_op_add_dep(op, p->slot, p->seq);
    vc_join(&op->vc, p->vc);
}

/* Queues op after the positions preds[0..n) on a lane: the lane whose last
 * operation is one of them, else one unused by this launch, else a new
 * one.  Its position goes to *out. */
static void lane_enqueue(launch_t *l, sim_op_t *op, const gpos_t *preds, size_t n, gpos_t *out)
{
    struct CUgraphExec_st *top = l->top;
    size_t lane = SIZE_MAX, skip = SIZE_MAX;
    for (size_t i = 0; i < top->nlanes && lane == SIZE_MAX; i++)
        for (size_t p = 0; p < n && lane == SIZE_MAX; p++)
            if (l->used[i] && preds[p].seq && top->lanes[i]->slot == preds[p].slot &&
                top->lanes[i]->last_seq == preds[p].seq) {
                lane = i;
                skip = p;
            }
    for (size_t i = 0; i < top->nlanes && lane == SIZE_MAX; i++)
        if (!l->used[i])
            lane = i;
    if (lane == SIZE_MAX) {
        struct CUstream_st *s = sim_stream_create(top->ctx, SIM_STREAM_CREATED, CU_STREAM_NON_BLOCKING, 0);
        if (!s) {
            sim_op_free(op);
            l->r = CUDA_ERROR_OUT_OF_MEMORY;
            *out = (gpos_t){0};
            return;
        }
        top->lanes = xrealloc(top->lanes, (top->nlanes + 1) * sizeof *top->lanes);
        l->used = xrealloc(l->used, (top->nlanes + 1) * sizeof *l->used);
        top->lanes[top->nlanes] = s;
        l->used[top->nlanes] = false;
        lane = top->nlanes++;
    }
    for (size_t p = 0; p < n; p++)
        if (p != skip)
            op_after(op, &preds[p]);
    l->used[lane] = true;
    struct CUstream_st *s = top->lanes[lane];
    CUresult r = sim_enqueue(s, op);
    if (r != CUDA_SUCCESS)
        l->r = r;
    *out = pos_of(s);
}

/* The operation a node's launch queues. */
static sim_op_t *node_op(const sim_xnode_t *xn, int device)
{
    if (!xn->enabled)
        return sim_op_new(SIM_OP_WAIT, "disabled graph node");
    switch (xn->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
    case CU_GRAPH_NODE_TYPE_MEMCPY:
    case CU_GRAPH_NODE_TYPE_MEMSET:
    case CU_GRAPH_NODE_TYPE_HOST:
        if (!xn->op)
            break;
        /* a node on memory unmapped since (the virtual memory API) faults, as a kernel would */
        return sim_vmm_op_ok(xn->op, device) ? sim_op_clone(xn->op)
                                             : sim_op_new(SIM_OP_FAULT, "graph node on unmapped memory");
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
        if (handle_is(xn->event, SIM_MAGIC_EVENT)) {
            sim_op_t *op = sim_op_new(SIM_OP_RECORD, "graph event record");
            op->event = xn->event;
            return op;
        }
        break;
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        if (handle_is(xn->event, SIM_MAGIC_EVENT) && xn->event->recorded) {
            sim_op_t *op = sim_op_new(SIM_OP_WAIT, "graph event wait");
            gpos_t p = {xn->event->slot, xn->event->seq, xn->event->vc};
            op_after(op, &p);
            return op;
        }
        break;
    default:
        break;
    }
    return sim_op_new(SIM_OP_WAIT, "graph node");
}

static void launch_nodes(launch_t *l, struct CUgraphExec_st *x, const gpos_t *entry, size_t nentry, gpos_t **sinks,
                         size_t *nsinks);

/* Which body of a conditional node a launch runs, from the handle's value
 * and the number of bodies; UINT_MAX for none.  One row per kind. */
static unsigned cond_if(unsigned value, unsigned n)
{
    return value ? 0 : n == 2 ? 1 : UINT_MAX;
}

static unsigned cond_while(unsigned value, unsigned n)
{
    (void)n;
    /* Nothing on the simulator can change the value (only device code
     * calls cudaGraphSetConditional): the body runs once, as the
     * iteration whose kernels would have cleared it. */
    if (value) {
        static atomic_flag once = ATOMIC_FLAG_INIT;
        if (!atomic_flag_test_and_set(&once))
            sim_log("a WHILE conditional node ran its body once: the simulator runs no device code that could "
                    "change its condition");
    }
    return value ? 0 : UINT_MAX;
}

static unsigned cond_switch(unsigned value, unsigned n)
{
    return value < n ? value : UINT_MAX;
}

static unsigned (*const cond_body[])(unsigned value, unsigned n) = {
    [CU_GRAPH_COND_TYPE_IF] = cond_if,
    [CU_GRAPH_COND_TYPE_WHILE] = cond_while,
    [CU_GRAPH_COND_TYPE_SWITCH] = cond_switch,
};

/* Queues sub after preds[0..n) and, after its sinks, one operation at
 * *out: a child graph or a conditional body, as one node. */
static void launch_sub(launch_t *l, struct CUgraphExec_st *sub, const gpos_t *preds, size_t n, const char *what,
                       gpos_t *out)
{
    gpos_t *sinks = NULL;
    size_t nsinks = 0;
    launch_nodes(l, sub, preds, n, &sinks, &nsinks);
    if (l->r == CUDA_SUCCESS)
        lane_enqueue(l, sim_op_new(SIM_OP_WAIT, what), sinks, nsinks, out);
    for (size_t i = 0; i < nsinks; i++)
        vc_release(sinks[i].vc);
    free(sinks);
}

/* Queues node k of x after its dependencies (or entry); its position in pos[k]. */
static void launch_node(launch_t *l, struct CUgraphExec_st *x, size_t k, const gpos_t *entry, size_t nentry,
                        gpos_t *pos)
{
    sim_xnode_t *xn = &x->nodes[k];
    gpos_t *preds = (gpos_t *)entry;
    size_t n = nentry;
    if (xn->ndeps) {
        preds = sim_xcalloc(xn->ndeps, sizeof *preds);
        for (size_t d = 0; d < xn->ndeps; d++)
            preds[d] = pos[xn->deps[d]];
        n = xn->ndeps;
    }
    unsigned body = xn->type == CU_GRAPH_NODE_TYPE_CONDITIONAL && xn->nbodies
                        ? cond_body[xn->cond_type](xn->cond_value, xn->nbodies)
                        : UINT_MAX;
    if (xn->type == CU_GRAPH_NODE_TYPE_GRAPH && xn->child && xn->enabled) {
        launch_sub(l, xn->child, preds, n, "child graph", &pos[k]);
    } else if (body != UINT_MAX) {
        launch_sub(l, xn->bodies[body], preds, n, "conditional node", &pos[k]);
    } else {
        lane_enqueue(l, node_op(xn, x->ctx->dev->ordinal), preds, n, &pos[k]);
    }
    if (preds != entry)
        free(preds);
}

/* Queues x's nodes, the roots after entry[0..n); the positions of the
 * nodes nothing depends on go to *sinks (retained). */
static void launch_nodes(launch_t *l, struct CUgraphExec_st *x, const gpos_t *entry, size_t nentry, gpos_t **sinks,
                         size_t *nsinks)
{
    gpos_t *pos = sim_xcalloc(x->nnodes ? x->nnodes : 1, sizeof *pos);
    bool *has_dependent = sim_xcalloc(x->nnodes ? x->nnodes : 1, sizeof *has_dependent);
    size_t k = 0;
    for (; k < x->nnodes && l->r == CUDA_SUCCESS; k++) {
        launch_node(l, x, k, entry, nentry, pos);
        for (size_t d = 0; d < x->nodes[k].ndeps; d++)
            has_dependent[x->nodes[k].deps[d]] = true;
    }
    *sinks = sim_xcalloc(k ? k : 1, sizeof **sinks);
    *nsinks = 0;
    for (size_t i = 0; i < k; i++) {
        if (!has_dependent[i])
            (*sinks)[(*nsinks)++] = pos[i];
        else
            vc_release(pos[i].vc);
    }
    if (!k && nentry) { /* an empty graph: it ends where it begins */
        (*sinks)[0] = entry[0];
        vc_retain(entry[0].vc);
        *nsinks = 1;
    }
    free(pos);
    free(has_dependent);
}

/* The graph memory a launch of x allocates and frees (checked first, then
 * done): an allocation still in use from an earlier launch is
 * CUDA_ERROR_INVALID_VALUE unless x frees it on launch. */
static CUresult launch_memory(struct CUgraphExec_st *x, bool apply)
{
    bool auto_free = (x->flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH) != 0;
    for (size_t i = 0; i < x->nnodes; i++) {
        sim_xnode_t *xn = &x->nodes[i];
        if (xn->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
            if (xn->block->live && !auto_free)
                return CUDA_ERROR_INVALID_VALUE;
            if (apply) {
                gblock_set_live(xn->block, false);
                gblock_set_live(xn->block, true);
            }
        } else if (xn->type == CU_GRAPH_NODE_TYPE_MEM_FREE) {
            if (!xn->own && !xn->block->live)
                return CUDA_ERROR_INVALID_VALUE;
            if (apply)
                gblock_set_live(xn->block, false);
        }
    }
    return CUDA_SUCCESS;
}

CUresult sim_exec_launch(struct CUgraphExec_st *x, struct CUstream_st *s)
{
    if (s->ctx->sticky != CUDA_SUCCESS)
        return s->ctx->sticky;
    CUresult r = launch_memory(x, false);
    if (r == CUDA_SUCCESS)
        r = exec_map(x);
    if (r != CUDA_SUCCESS)
        return r;
    launch_memory(x, true);
    sim_op_t *op = sim_op_new(SIM_OP_WAIT, "graph launch");
    gpos_t prev = {x->end_slot, x->end_seq, x->end_vc};
    op_after(op, &prev); /* after the instance's previous launch */
    r = sim_enqueue(s, op);
    if (r != CUDA_SUCCESS)
        return r;
    gpos_t entry = pos_of(s);
    launch_t l = {.top = x, .used = sim_xcalloc(x->nlanes ? x->nlanes : 1, sizeof *l.used), .r = CUDA_SUCCESS};
    gpos_t *sinks = NULL;
    size_t nsinks = 0;
    launch_nodes(&l, x, &entry, 1, &sinks, &nsinks);
    op = sim_op_new(SIM_OP_WAIT, "graph end");
    for (size_t i = 0; i < nsinks; i++) {
        op_after(op, &sinks[i]);
        vc_release(sinks[i].vc);
    }
    free(sinks);
    free(l.used);
    vc_release(entry.vc);
    r = sim_enqueue(s, op);
    if (l.r != CUDA_SUCCESS)
        r = l.r;
    vc_release(x->end_vc);
    x->end_slot = s->slot;
    x->end_seq = s->last_seq;
    x->end_vc = vc_retain(s->vc);
    for (size_t i = 0; i < x->nnodes; i++)
        if (x->nodes[i].block) {
            x->nodes[i].block->end_slot = s->slot;
            x->nodes[i].block->end_seq = s->last_seq;
        }
    return r;
}
