/*
 * rbtree: an intrusive red-black tree, for the allocator's free-block sets
 * ordered by (size, address).
 *
 * Intrusive: the caller embeds an rb_node_t in its own struct and gets the
 * struct back with rb_entry().  The tree never allocates and never compares:
 * the caller descends to the insertion point and calls rb_link() then
 * rb_insert_fixup() (Linux-kernel style), or uses the inline rb_insert() /
 * rb_lower_bound(), which take the comparator as an argument so that it
 * inlines at each call site.
 *
 *   typedef struct blk_s { size_t size; uintptr_t addr; rb_node_t rb; } blk_t;
 *   rb_node_t *n = rb_lower_bound(&free_set, &want, blk_cmp_key);  // best fit
 *   if (n) rb_erase(&free_set, n), b = rb_entry(n, blk_t, rb);
 *   ...
 *   rb_insert(&free_set, &b->rb, blk_cmp);                          // on free
 *
 * Invariants (rb_check() re-derives all of them):
 *   1. BST order: every node of a left subtree compares <= its ancestor,
 *      every node of a right subtree >= it.  Equal keys are allowed;
 *      rb_insert() puts a new equal key after the existing ones.
 *   2. Every node is red or black; the root is black.
 *   3. A red node has no red child.
 *   4. Every path from a node down to a NULL child holds the same number of
 *      black nodes (the black height).
 *   5. parent_color holds the parent's address (NULL for the root) in its
 *      high bits and the color in bit 0, and every child's parent is the
 *      node that points at it.
 * 2-4 bound the height by 2*log2(n+1): every operation is O(log n).
 *
 * Cost: rb_lower_bound and the rb_insert descent are inline loops of one
 * compare and one load per level; rb_insert_fixup and rb_erase live in
 * rbtree.c and do at most 2 (insert) or 3 (erase) rotations plus O(log n)
 * recolorings, usually O(1) amortized.
 *
 * Not thread-safe: the owner (one pool, under its device lock) serializes.
 */
#ifndef CUCACHE_CORE_RBTREE_H
#define CUCACHE_CORE_RBTREE_H

#include <stddef.h>
#include <stdint.h>

typedef struct rb_node_s {
    uintptr_t parent_color;  /* parent pointer | color in bit 0 (RB_RED / RB_BLACK) */
    struct rb_node_s *left;  /* keys <= this one; NULL if none */
    struct rb_node_s *right; /* keys >= this one; NULL if none */
} rb_node_t;

typedef struct rb_tree_s {
    rb_node_t *root; /* NULL when empty; black otherwise */
} rb_tree_t;

#define RB_TREE_INIT                                                                                                   \
    {                                                                                                                  \
        NULL                                                                                                           \
    }

/* Colors, bit 0 of parent_color.  Red is 0 so that rb_link() stores the
 * parent pointer as is. */
#define RB_RED ((uintptr_t)0)
#define RB_BLACK ((uintptr_t)1)

_Static_assert(_Alignof(rb_node_t) >= 2, "rb_node_t must leave bit 0 of its address free for the color");

/* container_of: the struct of `type` whose field `member` is at `ptr`. */
#define rb_entry(ptr, type, member) ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

typedef int (*rb_cmp_fn)(const rb_node_t *a, const rb_node_t *b);  /* <0, 0, >0 as a < b, ==, > */
typedef int (*rb_cmp_key_fn)(const void *key, const rb_node_t *n); /* <0, 0, >0 as key < n, ==, > */

/* The parent of n, or NULL for the root. */
static inline rb_node_t *rb_parent(const rb_node_t *n)
{
    return (rb_node_t *)(n->parent_color & ~RB_BLACK);
}

/* True if n is red (NULL children count as black). */
static inline int rb_is_red(const rb_node_t *n)
{
    return n && (n->parent_color & RB_BLACK) == RB_RED;
}

/* True if the tree holds no node. */
static inline int rb_empty(const rb_tree_t *t)
{
    return t->root == NULL;
}

/* Links `node`, red and childless, at *link under `parent`: the NULL child
 * pointer (or &t->root with parent NULL) where the caller's descent ended.
 * Call rb_insert_fixup() next. */
static inline void rb_link(rb_node_t *node, rb_node_t *parent, rb_node_t **link)
{
    node->parent_color = (uintptr_t)parent | RB_RED;
    node->left = node->right = NULL;
    *link = node;
}

/* Restores the color invariants after rb_link(); may rotate. */
void rb_insert_fixup(rb_tree_t *t, rb_node_t *node);

/* Unlinks `node`, which must be in t, and rebalances.  node's fields are
 * left stale. */
void rb_erase(rb_tree_t *t, rb_node_t *node);

/* The leftmost (smallest) node, or NULL when the tree is empty. */
static inline rb_node_t *rb_first(const rb_tree_t *t)
{
    rb_node_t *n = t->root;
    if (n)
        while (n->left)
            n = n->left;
    return n;
}

/* The rightmost (largest) node, or NULL when the tree is empty. */
static inline rb_node_t *rb_last(const rb_tree_t *t)
{
    rb_node_t *n = t->root;
    if (n)
        while (n->right)
            n = n->right;
    return n;
}

/* The in-order successor of n, or NULL if n is the last node. */
static inline rb_node_t *rb_next(const rb_node_t *n)
{
    if (n->right) {
        n = n->right;
        while (n->left)
            n = n->left;
        return (rb_node_t *)n;
    }
    rb_node_t *p = rb_parent(n);
    while (p && n == p->right) {
        n = p;
        p = rb_parent(p);
    }
    return p;
}

/* The in-order predecessor of n, or NULL if n is the first node. */
static inline rb_node_t *rb_prev(const rb_node_t *n)
{
    if (n->left) {
        n = n->left;
        while (n->right)
            n = n->right;
        return (rb_node_t *)n;
    }
    rb_node_t *p = rb_parent(n);
    while (p && n == p->left) {
        n = p;
        p = rb_parent(p);
    }
    return p;
}

/* Inserts `node` in order by cmp(node, other); a key equal to existing ones
 * goes after them (to their right). */
static inline void rb_insert(rb_tree_t *t, rb_node_t *node, rb_cmp_fn cmp)
{
    rb_node_t **link = &t->root, *parent = NULL;
    while (*link) {
        parent = *link;
        link = cmp(node, parent) < 0 ? &parent->left : &parent->right;
    }
    rb_link(node, parent, link);
    rb_insert_fixup(t, node);
}

/* The first node in order whose key is >= key (cmp_key(key, n) <= 0), i.e.
 * the leftmost of several equal ones; NULL if every key is smaller. */
static inline rb_node_t *rb_lower_bound(const rb_tree_t *t, const void *key, rb_cmp_key_fn cmp_key)
{
    rb_node_t *n = t->root, *found = NULL;
    while (n) {
        if (cmp_key(key, n) <= 0) {
            found = n;
            n = n->left;
        } else {
            n = n->right;
        }
    }
    return found;
}

/* Re-derives invariants 1-5 (cmp NULL: skips the order check).  Returns the
 * black height (0 for an empty tree), or -1 with a static reason in *why
 * (if why is not NULL).  O(n * height); for tests and debug builds. */
int rb_check(const rb_tree_t *t, rb_cmp_fn cmp, const char **why);

/* The number of nodes, O(n). */
size_t rb_count(const rb_tree_t *t);

#endif
