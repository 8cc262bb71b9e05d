/*
 * Proves that core/rbtree keeps every red-black invariant (rb_check after
 * each step) and exactly the contents of a sorted reference, in order both
 * ways, through ascending, descending, random and duplicate-key insert and
 * erase sequences; that equal keys keep their insertion order; that
 * rb_lower_bound agrees with a linear search; that erase is right for the
 * root, leaves and nodes with one or two children; that 100k random
 * operations take well under a second; and that rb_check does fail on a
 * corrupted tree, so the other tests can fail too.
 *
 * The random tests share one seed, printed at start; RBTREE_SEED=<n>
 * replays a run.
 */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "rbtree.h"

#define MAX_ITEMS 10000

typedef struct item_s {
    int key;      /* the ordering key; duplicates allowed */
    unsigned seq; /* insertion order, global: tells equal keys apart */
    bool in_tree; /* the reference model: linked in the tree under test */
    rb_node_t rb;
} item_t;

static item_t items[MAX_ITEMS];
static item_t *ref[MAX_ITEMS]; /* scratch: the reference order */
static size_t items_hi;        /* items[items_hi..] are untouched since tree_reset */
static unsigned next_seq;
static uint64_t seed; /* the run's seed (RBTREE_SEED or clock) */
static uint64_t rng;  /* splitmix64 state */

/* ------------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------- */

/* Starts a test's random stream: the run's seed mixed with a test number, so
 * each test replays alone or in any order. */
static void rng_start(unsigned test)
{
    rng = seed ^ ((uint64_t)test * 0x9e3779b97f4a7c15u);
}

/* A uniform-enough number in [0, n) (splitmix64). */
static unsigned rng_below(unsigned n)
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    z ^= z >> 31;
    return (unsigned)(z % n);
}

/* Fills perm with a random permutation of 0..n-1. */
static void rng_permutation(unsigned *perm, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        perm[i] = i;
    for (unsigned i = n; i > 1; i--) {
        unsigned j = rng_below(i), tmp = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = tmp;
    }
}

static const item_t *item_of(const rb_node_t *n)
{
    return rb_entry(n, item_t, rb);
}

/* Orders by key only: equal keys compare equal. */
static int item_cmp(const rb_node_t *a, const rb_node_t *b)
{
    int ka = item_of(a)->key, kb = item_of(b)->key;
    return (ka > kb) - (ka < kb);
}

/* rb_lower_bound's comparator: key points at an int. */
static int item_cmp_key(const void *key, const rb_node_t *n)
{
    int k = *(const int *)key, kn = item_of(n)->key;
    return (k > kn) - (k < kn);
}

/* The reference order: by key, then by insertion (equal keys go right). */
static int ref_cmp(const void *a, const void *b)
{
    const item_t *x = *(item_t *const *)a, *y = *(item_t *const *)b;
    if (x->key != y->key)
        return (x->key > y->key) - (x->key < y->key);
    return (x->seq > y->seq) - (x->seq < y->seq);
}

/* Empties the tree and the model. */
static void tree_reset(rb_tree_t *t)
{
    *t = (rb_tree_t)RB_TREE_INIT;
    memset(items, 0, items_hi * sizeof(items[0]));
    items_hi = 0;
    next_seq = 0;
}

static void item_insert(rb_tree_t *t, item_t *it, int key)
{
    assert_false(it->in_tree);
    it->key = key;
    it->seq = next_seq++;
    it->in_tree = true;
    if ((size_t)(it - items) >= items_hi)
        items_hi = (size_t)(it - items) + 1;
    rb_insert(t, &it->rb, item_cmp);
}

static void item_erase(rb_tree_t *t, item_t *it)
{
    assert_true(it->in_tree);
    rb_erase(t, &it->rb);
    it->in_tree = false;
}

/* Sorts the items in the tree (per the model) into ref[]; returns how many. */
static size_t ref_build(void)
{
    size_t n = 0;
    for (size_t i = 0; i < items_hi; i++)
        if (items[i].in_tree)
            ref[n++] = &items[i];
    qsort(ref, n, sizeof(ref[0]), ref_cmp);
    return n;
}

/* The tree is valid and holds exactly ref[0..n), in order forwards and
 * backwards. */
static void verify(const rb_tree_t *t)
{
    const char *why = NULL;
    int h = rb_check(t, item_cmp, &why);
    if (h < 0)
        fail_msg("rb_check: %s", why);
    size_t n = ref_build(), i = 0;
    for (const rb_node_t *x = rb_first(t); x; x = rb_next(x), i++) {
        assert_true(i < n);
        assert_ptr_equal(item_of(x), ref[i]);
    }
    assert_int_equal(i, n);
    for (const rb_node_t *x = rb_last(t); x; x = rb_prev(x)) {
        assert_true(i > 0);
        assert_ptr_equal(item_of(x), ref[--i]);
    }
    assert_int_equal(i, 0);
    assert_int_equal(rb_count(t), n);
    assert_int_equal(rb_empty(t), n == 0);
}

/* ------------------------------------------------------------------------
 * Insert and erase sequences
 * ---------------------------------------------------------------------- */

/* Inserts keys 0..n-1, then erases them, each ascending or descending,
 * verifying every step. */
static void run_sequence(unsigned n, bool ins_down, bool era_down)
{
    rb_tree_t t;
    tree_reset(&t);
    verify(&t);
    for (unsigned i = 0; i < n; i++) {
        unsigned k = ins_down ? n - 1 - i : i;
        item_insert(&t, &items[k], (int)k);
        verify(&t);
    }
    for (unsigned i = 0; i < n; i++) {
        unsigned k = era_down ? n - 1 - i : i;
        item_erase(&t, &items[k]);
        verify(&t);
    }
    assert_null(t.root);
}

static void test_ascending(void **state)
{
    run_sequence(600, false, false);
    run_sequence(600, false, true);
}

static void test_descending(void **state)
{
    run_sequence(600, true, true);
    run_sequence(600, true, false);
}

/* Random inserts and erases over a pool of 500 items with keys in [0, 150):
 * many duplicates, sizes drifting up and down. */
static void test_random_ops(void **state)
{
    rb_tree_t t;
    tree_reset(&t);
    rng_start(1);
    for (unsigned step = 0; step < 6000; step++) {
        item_t *it = &items[rng_below(500)];
        bool grow = (step / 1500) % 2 == 0; /* phases that fill, then drain */
        if (it->in_tree && rng_below(4) < (grow ? 1u : 3u))
            item_erase(&t, it);
        else if (!it->in_tree)
            item_insert(&t, it, (int)rng_below(150));
        verify(&t);
    }
}

/* Equal keys: insertion order kept (verify compares seq order), all
 * mixtures of equal and distinct keys, erased in random order. */
static void test_duplicates(void **state)
{
    static const unsigned nkeys[] = {1, 2, 3, 7};
    unsigned perm[400];
    rb_tree_t t;
    rng_start(2);
    for (size_t r = 0; r < sizeof(nkeys) / sizeof(nkeys[0]); r++) {
        tree_reset(&t);
        for (unsigned i = 0; i < 400; i++) {
            item_insert(&t, &items[i], (int)rng_below(nkeys[r]));
            verify(&t);
        }
        rng_permutation(perm, 400);
        for (unsigned i = 0; i < 400; i++) {
            item_erase(&t, &items[perm[i]]);
            verify(&t);
        }
    }
}

/* Builds a tree of n random keys and erases all in random order. */
static void test_erase_all_random(void **state)
{
    unsigned perm[1500];
    rb_tree_t t;
    tree_reset(&t);
    rng_start(3);
    for (unsigned i = 0; i < 1500; i++)
        item_insert(&t, &items[i], (int)rng_below(100000));
    verify(&t);
    rng_permutation(perm, 1500);
    for (unsigned i = 0; i < 1500; i++) {
        item_erase(&t, &items[perm[i]]);
        verify(&t);
    }
    assert_null(t.root);
}

/* Which case of rb_erase a node exercises. */
enum shape { SHAPE_ROOT, SHAPE_LEAF, SHAPE_ONE_CHILD, SHAPE_TWO_CHILDREN, SHAPE_COUNT };

static enum shape node_shape(const rb_tree_t *t, const rb_node_t *n)
{
    if (n == t->root)
        return SHAPE_ROOT;
    if (!n->left && !n->right)
        return SHAPE_LEAF;
    return n->left && n->right ? SHAPE_TWO_CHILDREN : SHAPE_ONE_CHILD;
}

/* For every size 1..70 and every node of a tree built in random order:
 * erase that one node and verify.  Every shape must have been seen many
 * times, black and (where a valid tree allows it: not the root, not a node
 * with one child, which is black over a red leaf) red. */
static void test_erase_shapes(void **state)
{
    unsigned perm[70], seen[SHAPE_COUNT][2] = {{0}};
    rb_tree_t t;
    rng_start(4);
    for (unsigned n = 1; n <= 70; n++) {
        for (unsigned victim = 0; victim < n; victim++) {
            tree_reset(&t);
            rng_permutation(perm, n);
            for (unsigned i = 0; i < n; i++)
                item_insert(&t, &items[perm[i]], (int)perm[i]);
            verify(&t);
            seen[node_shape(&t, &items[victim].rb)][rb_is_red(&items[victim].rb)]++;
            item_erase(&t, &items[victim]);
            verify(&t);
        }
    }
    for (int s = 0; s < SHAPE_COUNT; s++) {
        print_message("erase shape %d: %u black, %u red\n", s, seen[s][0], seen[s][1]);
        assert_true(seen[s][0] > 10);
        if (s == SHAPE_ROOT || s == SHAPE_ONE_CHILD)
            assert_int_equal(seen[s][1], 0);
        else
            assert_true(seen[s][1] > 10);
    }
}

/* ------------------------------------------------------------------------
 * Lower bound
 * ---------------------------------------------------------------------- */

/* Compares rb_lower_bound with a linear scan of ref[0..n) for every probe
 * from below the minimum to above the maximum. */
static void check_lower_bounds(const rb_tree_t *t, int lo, int hi)
{
    size_t n = ref_build();
    for (int probe = lo; probe <= hi; probe++) {
        const item_t *want = NULL;
        for (size_t i = 0; i < n && !want; i++)
            if (ref[i]->key >= probe)
                want = ref[i];
        const rb_node_t *got = rb_lower_bound(t, &probe, item_cmp_key);
        if ((got ? item_of(got) : NULL) != want)
            fail_msg("lower_bound(%d): got key %d seq %u, want key %d seq %u", probe, got ? item_of(got)->key : -1,
                     got ? item_of(got)->seq : 0, want ? want->key : -1, want ? want->seq : 0);
    }
}

/* Keys are multiples of 3 (probes fall on, between, below and above them)
 * with duplicates; the leftmost of equal keys must be found. */
static void test_lower_bound(void **state)
{
    int probe = 0;
    rb_tree_t t;
    tree_reset(&t);
    rng_start(5);
    assert_null(rb_lower_bound(&t, &probe, item_cmp_key));
    for (unsigned i = 0; i < 600; i++)
        item_insert(&t, &items[i], 3 * (int)rng_below(300));
    verify(&t);
    check_lower_bounds(&t, -5, 3 * 300 + 5);
    for (unsigned i = 0; i < 600; i += 2)
        item_erase(&t, &items[i]);
    verify(&t);
    check_lower_bounds(&t, -5, 3 * 300 + 5);
    item_insert(&t, &items[0], 42);
    check_lower_bounds(&t, -5, 3 * 300 + 5);
}

/* ------------------------------------------------------------------------
 * Smoke test
 * ---------------------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* 100k random inserts, erases and lower bounds on up to 10k nodes, timed
 * without the checks (rb_check on a stride, outside the clock). */
static void test_smoke_100k(void **state)
{
    rb_tree_t t;
    size_t live = 0;
    double spent = 0;
    tree_reset(&t);
    rng_start(6);
    for (unsigned round = 0; round < 100; round++) {
        double t0 = now_s();
        for (unsigned op = 0; op < 1000; op++) {
            item_t *it = &items[rng_below(MAX_ITEMS)];
            int key = (int)rng_below(1u << 20);
            if (it->in_tree) {
                rb_node_t *lb = rb_lower_bound(&t, &key, item_cmp_key);
                if (lb && item_of(lb)->key < key)
                    fail_msg("lower_bound(%d) returned smaller key %d", key, item_of(lb)->key);
                item_erase(&t, it);
                live--;
            } else {
                item_insert(&t, it, key);
                live++;
            }
        }
        spent += now_s() - t0;
        const char *why = NULL;
        if (rb_check(&t, item_cmp, &why) < 0)
            fail_msg("rb_check after %u ops: %s", (round + 1) * 1000, why);
    }
    assert_int_equal(rb_count(&t), live);
    verify(&t);
    print_message("100k ops on up to %zu nodes: %.1f ms\n", live, spent * 1e3);
    assert_true(spent < 1.0);
}

/* ------------------------------------------------------------------------
 * rb_check fails on corrupted trees
 * ---------------------------------------------------------------------- */

/* A valid tree of keys 0..n-1, inserted ascending. */
static void build_valid(rb_tree_t *t, unsigned n)
{
    tree_reset(t);
    for (unsigned i = 0; i < n; i++)
        item_insert(t, &items[i], (int)i);
    verify(t);
}

/* rb_check must fail, with a reason containing `what`. */
static void expect_broken(const rb_tree_t *t, const char *what)
{
    const char *why = NULL;
    assert_int_equal(rb_check(t, item_cmp, &why), -1);
    assert_non_null(why);
    print_message("rb_check: %s\n", why);
    assert_non_null(strstr(why, what));
    assert_int_equal(rb_check(t, item_cmp, NULL), -1); /* why is optional */
}

/* rb_check must pass again once the corruption is undone. */
static void expect_valid(const rb_tree_t *t)
{
    const char *why = "unset";
    assert_true(rb_check(t, item_cmp, &why) > 0);
    assert_null(why);
}

/* Finds a node satisfying pred, or fails the test. */
static item_t *find_node(unsigned n, bool (*pred)(const rb_tree_t *t, const rb_node_t *x), const rb_tree_t *t)
{
    for (unsigned i = 0; i < n; i++)
        if (pred(t, &items[i].rb))
            return &items[i];
    fail_msg("no node fits the corruption");
    return NULL;
}

static bool is_red_with_child(const rb_tree_t *t, const rb_node_t *x)
{
    return rb_is_red(x) && x->left;
}

static bool is_red_leaf(const rb_tree_t *t, const rb_node_t *x)
{
    return rb_is_red(x) && !x->left && !x->right;
}

static bool is_deep_leaf(const rb_tree_t *t, const rb_node_t *x)
{
    return !x->left && !x->right && rb_parent(x) != t->root && rb_parent(rb_parent(x)) != t->root;
}

static void test_check_swapped_keys(void **state)
{
    rb_tree_t t;
    build_valid(&t, 100);
    item_t *a = &items[10], *b = &items[70];
    int tmp = a->key;
    a->key = b->key;
    b->key = tmp;
    expect_broken(&t, "order");
    b->key = a->key;
    a->key = tmp;
    expect_valid(&t);
    /* neighbours in order swapped: only one ancestor bound can see it */
    a = &items[41], b = &items[42];
    a->key = 42;
    b->key = 41;
    expect_broken(&t, "order");
    a->key = 41;
    b->key = 42;
    expect_valid(&t);
}

static void test_check_red_red(void **state)
{
    rb_tree_t t;
    build_valid(&t, 100);
    item_t *it = find_node(100, is_red_with_child, &t);
    rb_node_t *child = it->rb.left;
    uintptr_t saved = child->parent_color;
    child->parent_color &= ~RB_BLACK; /* red */
    expect_broken(&t, "red child");
    child->parent_color = saved;
    expect_valid(&t);
}

static void test_check_parent_pointer(void **state)
{
    rb_tree_t t;
    build_valid(&t, 100);
    item_t *it = find_node(100, is_deep_leaf, &t);
    uintptr_t saved = it->rb.parent_color;
    it->rb.parent_color = (uintptr_t)t.root | (saved & RB_BLACK);
    expect_broken(&t, "parent");
    it->rb.parent_color = saved;
    expect_valid(&t);
    /* the root must have no parent */
    saved = t.root->parent_color;
    t.root->parent_color = (uintptr_t)&items[99].rb | RB_BLACK;
    expect_broken(&t, "parent");
    t.root->parent_color = saved;
    expect_valid(&t);
}

static void test_check_black_height_and_root(void **state)
{
    rb_tree_t t;
    build_valid(&t, 100);
    item_t *it = find_node(100, is_red_leaf, &t);
    it->rb.parent_color |= RB_BLACK;
    expect_broken(&t, "black heights");
    it->rb.parent_color &= ~RB_BLACK;
    expect_valid(&t);
    t.root->parent_color &= ~RB_BLACK;
    expect_broken(&t, "root is red");
    t.root->parent_color |= RB_BLACK;
    expect_valid(&t);
}

/* ---------------------------------------------------------------------- */

int main(void)
{
    const char *env = getenv("RBTREE_SEED");
    seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    printf("test_rbtree: seed %" PRIu64 " (replay: RBTREE_SEED=%" PRIu64 ")\n", seed, seed);
    fflush(stdout);

    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ascending),
        cmocka_unit_test(test_descending),
        cmocka_unit_test(test_random_ops),
        cmocka_unit_test(test_duplicates),
        cmocka_unit_test(test_erase_all_random),
        cmocka_unit_test(test_erase_shapes),
        cmocka_unit_test(test_lower_bound),
        cmocka_unit_test(test_smoke_100k),
        cmocka_unit_test(test_check_swapped_keys),
        cmocka_unit_test(test_check_red_red),
        cmocka_unit_test(test_check_parent_pointer),
        cmocka_unit_test(test_check_black_height_and_root),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
