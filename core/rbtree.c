/*
 * rbtree: the rebalancing half of the intrusive red-black tree (rbtree.h
 * holds the invariants, the descent and the iteration).
 *
 * NULL children are the black leaves of the textbook algorithm.  Rotations
 * keep each node's color while they rewrite its parent pointer.  Insertion
 * and erasure walk up from the change: each loop iteration either ends with
 * at most two (insert) or three (erase) rotations, or only recolors and
 * moves two levels (insert) or one level (erase) up.
 */
#include "rbtree.h"

#include <stdbool.h>

/* The longest root-to-leaf path a valid tree can have: 2*log2(n+1) with n
 * bounded by the address space.  rb_check() refuses anything deeper, which
 * also stops it on a cycle. */
#define RB_MAX_DEPTH 128

/* Sets n's parent, keeping its color. */
static inline void node_set_parent(rb_node_t *n, rb_node_t *p)
{
    n->parent_color = (uintptr_t)p | (n->parent_color & RB_BLACK);
}

/* Sets n's color, keeping its parent. */
static inline void node_set_color(rb_node_t *n, uintptr_t color)
{
    n->parent_color = (n->parent_color & ~RB_BLACK) | color;
}

/* True for a black node or a NULL leaf. */
static inline bool node_is_black(const rb_node_t *n)
{
    return !n || (n->parent_color & RB_BLACK);
}

/* Makes `parent` (or the root when parent is NULL) point at `new_child`
 * where it pointed at `old_child`. */
static inline void node_replace_child(rb_tree_t *t, rb_node_t *parent, rb_node_t *old_child, rb_node_t *new_child)
{
    if (!parent)
        t->root = new_child;
    else if (parent->left == old_child)
        parent->left = new_child;
    else
        parent->right = new_child;
}

/* Rotates x down to the left: its right child y takes its place. */
static void node_rotate_left(rb_tree_t *t, rb_node_t *x)
{
    rb_node_t *y = x->right, *p = rb_parent(x);
    x->right = y->left;
    if (y->left)
        node_set_parent(y->left, x);
    y->left = x;
    node_set_parent(y, p);
    node_set_parent(x, y);
    node_replace_child(t, p, x, y);
}

/* Rotates x down to the right: its left child y takes its place. */
static void node_rotate_right(rb_tree_t *t, rb_node_t *x)
{
    rb_node_t *y = x->left, *p = rb_parent(x);
    x->left = y->right;
    if (y->right)
        node_set_parent(y->right, x);
    y->right = x;
    node_set_parent(y, p);
    node_set_parent(x, y);
    node_replace_child(t, p, x, y);
}

/* Insert fixup: node and its parent are red, the parent is a left child of
 * the (black) grandparent g, and the uncle is black.  Two rotations at most;
 * ends the fixup. */
static void insert_rotate_left_side(rb_tree_t *t, rb_node_t *node, rb_node_t *parent, rb_node_t *g)
{
    if (node == parent->right) {
        node_rotate_left(t, parent);
        parent = node;
    }
    node_rotate_right(t, g);
    node_set_color(parent, RB_BLACK);
    node_set_color(g, RB_RED);
}

/* The mirror of insert_rotate_left_side: the parent is a right child. */
static void insert_rotate_right_side(rb_tree_t *t, rb_node_t *node, rb_node_t *parent, rb_node_t *g)
{
    if (node == parent->left) {
        node_rotate_right(t, parent);
        parent = node;
    }
    node_rotate_left(t, g);
    node_set_color(parent, RB_BLACK);
    node_set_color(g, RB_RED);
}

/* Restores invariants 2 and 3 after rb_link() added a red leaf: while the
 * node's parent is red, a red uncle pushes the red up to the grandparent
 * (recolor, continue two levels up); a black uncle is fixed by rotation. */
__attribute__((noinline)) void rb_insert_fixup(rb_tree_t *t, rb_node_t *node)
{
    for (;;) {
        rb_node_t *parent = rb_parent(node);
        if (!parent) {
            node_set_color(node, RB_BLACK); /* the root: black height grows by one */
            return;
        }
        if (node_is_black(parent))
            return;
        rb_node_t *g = rb_parent(parent); /* exists: a red parent is not the root */
        rb_node_t *uncle = parent == g->left ? g->right : g->left;
        if (node_is_black(uncle)) {
            if (parent == g->left)
                insert_rotate_left_side(t, node, parent, g);
            else
                insert_rotate_right_side(t, node, parent, g);
            return;
        }
        node_set_color(parent, RB_BLACK);
        node_set_color(uncle, RB_BLACK);
        node_set_color(g, RB_RED);
        node = g;
    }
}

/* Erase fixup step, x (possibly NULL) a left child of parent and one black
 * short.  Returns the node still one black short (parent, after a recolor
 * moved the deficit up), or NULL when the deficit is settled. */
static rb_node_t *erase_fix_left(rb_tree_t *t, rb_node_t *parent)
{
    rb_node_t *w = parent->right; /* non-NULL: its side has black height >= 1 */
    if (!node_is_black(w)) {
        node_set_color(w, RB_BLACK);
        node_set_color(parent, RB_RED);
        node_rotate_left(t, parent);
        w = parent->right;
    }
    if (node_is_black(w->left) && node_is_black(w->right)) {
        node_set_color(w, RB_RED);
        return parent;
    }
    if (node_is_black(w->right)) {
        node_set_color(w->left, RB_BLACK);
        node_set_color(w, RB_RED);
        node_rotate_right(t, w);
        w = parent->right;
    }
    node_set_color(w, parent->parent_color & RB_BLACK);
    node_set_color(parent, RB_BLACK);
    node_set_color(w->right, RB_BLACK);
    node_rotate_left(t, parent);
    return NULL;
}

/* The mirror of erase_fix_left: x is a right child. */
static rb_node_t *erase_fix_right(rb_tree_t *t, rb_node_t *parent)
{
    rb_node_t *w = parent->left;
    if (!node_is_black(w)) {
        node_set_color(w, RB_BLACK);
        node_set_color(parent, RB_RED);
        node_rotate_right(t, parent);
        w = parent->left;
    }
    if (node_is_black(w->left) && node_is_black(w->right)) {
        node_set_color(w, RB_RED);
        return parent;
    }
    if (node_is_black(w->left)) {
        node_set_color(w->right, RB_BLACK);
        node_set_color(w, RB_RED);
        node_rotate_left(t, w);
        w = parent->left;
    }
    node_set_color(w, parent->parent_color & RB_BLACK);
    node_set_color(parent, RB_BLACK);
    node_set_color(w->left, RB_BLACK);
    node_rotate_right(t, parent);
    return NULL;
}

/* Restores invariant 4 after a black node was removed above x (possibly a
 * NULL leaf) under parent: a red x simply turns black; otherwise the
 * deficit moves up until a rotation absorbs it or it reaches the root. */
static void erase_fixup(rb_tree_t *t, rb_node_t *x, rb_node_t *parent)
{
    while (x != t->root && node_is_black(x)) {
        /* x == NULL with both children of parent NULL cannot happen here:
         * the sibling's side has a black node to make up for x's. */
        x = parent->left == x ? erase_fix_left(t, parent) : erase_fix_right(t, parent);
        if (!x)
            return;
        parent = rb_parent(x);
    }
    if (x)
        node_set_color(x, RB_BLACK);
}

/* Unlinks node.  With at most one child, the child takes its place; with
 * two, its in-order successor s (leftmost of the right subtree) does, taking
 * node's color too, so the black node lost is s's, at s's old position. */
__attribute__((noinline)) void rb_erase(rb_tree_t *t, rb_node_t *node)
{
    rb_node_t *child, *parent;
    uintptr_t color;
    if (!node->left || !node->right) {
        child = node->left ? node->left : node->right;
        parent = rb_parent(node);
        color = node->parent_color & RB_BLACK;
        if (child)
            node_set_parent(child, parent);
        node_replace_child(t, parent, node, child);
    } else {
        rb_node_t *s = node->right;
        while (s->left)
            s = s->left;
        child = s->right;
        color = s->parent_color & RB_BLACK;
        if (s == node->right) {
            parent = s;
        } else {
            parent = rb_parent(s);
            parent->left = child;
            if (child)
                node_set_parent(child, parent);
            s->right = node->right;
            node_set_parent(s->right, s);
        }
        s->left = node->left;
        node_set_parent(s->left, s);
        s->parent_color = node->parent_color;
        node_replace_child(t, rb_parent(node), node, s);
    }
    if (color == RB_BLACK)
        erase_fixup(t, child, parent);
}

/* Records why rb_check failed; returns -1. */
static int check_fail(const char **why, const char *reason)
{
    *why = reason;
    return -1;
}

/* rb_check over the subtree at n, whose parent must be `parent` and whose
 * keys must lie in [lo, hi] (NULL: unbounded).  Returns its black height
 * counting the NULL leaves as 1, or -1 with *why set. */
static int check_subtree(const rb_node_t *n, const rb_node_t *parent, const rb_node_t *lo, const rb_node_t *hi,
                         rb_cmp_fn cmp, int depth, const char **why)
{
    if (!n)
        return 1;
    if (depth > RB_MAX_DEPTH)
        return check_fail(why, "deeper than any valid tree (a cycle?)");
    if (rb_parent(n) != parent)
        return check_fail(why, "a node's parent pointer is not the node that links it");
    if (cmp && ((lo && cmp(lo, n) > 0) || (hi && cmp(n, hi) > 0)))
        return check_fail(why, "BST order: a node is out of order with an ancestor");
    if (rb_is_red(n) && (rb_is_red(n->left) || rb_is_red(n->right)))
        return check_fail(why, "a red node has a red child");
    int lh = check_subtree(n->left, n, lo, n, cmp, depth + 1, why);
    if (lh < 0)
        return -1;
    int rh = check_subtree(n->right, n, n, hi, cmp, depth + 1, why);
    if (rh < 0)
        return -1;
    if (lh != rh)
        return check_fail(why, "black heights of a node's two subtrees differ");
    return lh + node_is_black(n);
}

/* Re-derives the invariants of rbtree.h; see there. */
int rb_check(const rb_tree_t *t, rb_cmp_fn cmp, const char **why)
{
    const char *reason = NULL;
    if (t->root && rb_is_red(t->root))
        reason = "the root is red";
    int h = reason ? -1 : check_subtree(t->root, NULL, NULL, NULL, cmp, 0, &reason);
    if (why)
        *why = reason;
    return h < 0 ? -1 : h - 1;
}

/* Counts the nodes by in-order iteration. */
size_t rb_count(const rb_tree_t *t)
{
    size_t n = 0;
    for (const rb_node_t *x = rb_first(t); x; x = rb_next(x))
        n++;
    return n;
}
