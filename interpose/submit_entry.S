/*
 * Counting trampolines for the driver entry points that submit work
 * (interpose/submit.c says what the count is for).
 *
 * Each exported trampoline, named like the driver's entry point it stands
 * for (submit_table.h's HOOK_SUBMIT_EXPORTS), adds one to
 * hook_submissions and jumps to the driver's function with every argument
 * register and the stack as the caller left them: any prototype, stack
 * arguments included, and no frame of ours on the way.  The driver's
 * address is resolved on the first call when it was not yet (the slow path
 * saves the argument registers around hook_submit_resolve).  A pool of
 * anonymous trampolines does the same for addresses cuGetProcAddress gives
 * that are no exported symbol's (hook_submit_pool_real[k]).
 */
#include "submit_sim.h"
#include "submit_table.h"

#define HOOK_SUBMIT_POOL 64

/* The pool, HOOK_SUBMIT_POOL trampolines, k-th at hook_submit_pool +
 * k * HOOK_SUBMIT_POOL_STRIDE (submit.c): 1 << stride_log2.  Between
 * POOL_BEGIN and POOL_END, trampoline k jumps through
 * hook_submit_pool_real[k], set before its address is handed out. */
#define POOL_BEGIN(stride_log2)                                                                                        \
    .globl hook_submit_pool;                                                                                           \
    .hidden hook_submit_pool;                                                                                          \
    .p2align 6;                                                                                                        \
    hook_submit_pool:                                                                                                  \
    .set k, 0;                                                                                                         \
    .rept HOOK_SUBMIT_POOL;                                                                                            \
    .p2align stride_log2
#define POOL_END                                                                                                       \
    .set k, k + 1;                                                                                                     \
    .endr

#if defined(__x86_64__)

#if defined(__CET__)
#define ENDBR endbr64;
#else
#define ENDBR
#endif

/* hook_submissions += 1, atomically. */
#define COUNT lock incq hook_submissions(%rip)

#define TRAMP(name)                                                                                                    \
    .globl name;                                                                                                       \
    .type name, @function;                                                                                             \
    .p2align 4;                                                                                                        \
    name:                                                                                                              \
    ENDBR                                                                                                              \
    COUNT;                                                                                                             \
    movq hook_submit_real_##name(%rip), %r11;                                                                          \
    testq %r11, %r11;                                                                                                  \
    jz 1f;                                                                                                             \
    jmp *%r11;                                                                                                         \
    1: leaq hook_submit_real_##name(%rip), %r11;                                                                      \
    jmp hook_submit_slow;                                                                                              \
    .size name, .- name;

    .text
HOOK_SUBMIT_EXPORTS(TRAMP)
HOOK_SUBMIT_SIM(TRAMP)

/* The vector argument registers hook_submit_slow saves, and their places
 * (X(n, place) for %xmm<n>). */
#define XMM_SLOTS(X) X(0, 0) X(1, 16) X(2, 32) X(3, 48) X(4, 64) X(5, 80) X(6, 96) X(7, 112)
#define XMM_SAVE(n, place) movdqu %xmm##n, place(%rsp);
#define XMM_LOAD(n, place) movdqu place(%rsp), %xmm##n;

/* r11: the slot to fill.  Saves the argument registers (and rax, the
 * vector count of a variadic call), asks C for the address, restores them
 * and jumps there; without one, returns CUDA_ERROR_NOT_INITIALIZED (3). */
    .p2align 4
    .type hook_submit_slow, @function
hook_submit_slow:
    .cfi_startproc
    pushq %rdi
    .cfi_adjust_cfa_offset 8
    pushq %rsi
    .cfi_adjust_cfa_offset 8
    pushq %rdx
    .cfi_adjust_cfa_offset 8
    pushq %rcx
    .cfi_adjust_cfa_offset 8
    pushq %r8
    .cfi_adjust_cfa_offset 8
    pushq %r9
    .cfi_adjust_cfa_offset 8
    pushq %rax
    .cfi_adjust_cfa_offset 8
    subq $128, %rsp
    .cfi_adjust_cfa_offset 128
    XMM_SLOTS(XMM_SAVE)
    movq %r11, %rdi
    call hook_submit_resolve
    movq %rax, %r11
    XMM_SLOTS(XMM_LOAD)
    addq $128, %rsp
    .cfi_adjust_cfa_offset -128
    popq %rax
    .cfi_adjust_cfa_offset -8
    popq %r9
    .cfi_adjust_cfa_offset -8
    popq %r8
    .cfi_adjust_cfa_offset -8
    popq %rcx
    .cfi_adjust_cfa_offset -8
    popq %rdx
    .cfi_adjust_cfa_offset -8
    popq %rsi
    .cfi_adjust_cfa_offset -8
    popq %rdi
    .cfi_adjust_cfa_offset -8
    testq %r11, %r11
    jz 2f
    jmp *%r11
2:  movl $3, %eax
    ret
    .cfi_endproc
    .size hook_submit_slow, .-hook_submit_slow

POOL_BEGIN(5)
    ENDBR
    COUNT
    jmp *hook_submit_pool_real+8*k(%rip)
POOL_END

#elif defined(__aarch64__)

/* hook_submissions += 1, atomically (clobbers x15-x17, no argument
 * register). */
#define COUNT                                                                                                          \
    adrp x16, hook_submissions;                                                                                        \
    add x16, x16, :lo12:hook_submissions;                                                                              \
    1: ldxr x17, [x16];                                                                                               \
    add x17, x17, #1;                                                                                                  \
    stxr w15, x17, [x16];                                                                                              \
    cbnz w15, 1b

#define TRAMP(name)                                                                                                    \
    .globl name;                                                                                                       \
    .type name, %function;                                                                                             \
    .p2align 4;                                                                                                        \
    name:                                                                                                              \
    COUNT;                                                                                                             \
    adrp x16, hook_submit_real_##name;                                                                                 \
    add x16, x16, :lo12:hook_submit_real_##name;                                                                       \
    ldr x17, [x16];                                                                                                    \
    cbz x17, hook_submit_slow;                                                                                         \
    br x17;                                                                                                            \
    .size name, .- name;

    .text
HOOK_SUBMIT_EXPORTS(TRAMP)
HOOK_SUBMIT_SIM(TRAMP)

/* The registers hook_submit_slow saves around its call, and their places
 * in its frame: pair(x0, x1, place) for each two, single(x8, place). */
#define SAVED(pair, single)                                                                                            \
    pair x0, x1, [sp, #16];                                                                                            \
    pair x2, x3, [sp, #32];                                                                                            \
    pair x4, x5, [sp, #48];                                                                                            \
    pair x6, x7, [sp, #64];                                                                                            \
    pair q0, q1, [sp, #80];                                                                                            \
    pair q2, q3, [sp, #112];                                                                                           \
    pair q4, q5, [sp, #144];                                                                                           \
    pair q6, q7, [sp, #176];                                                                                           \
    single x8, [sp, #208]

/* x16: the slot to fill; x0-x7, x8 and q0-q7 saved around the call. */
    .p2align 4
    .type hook_submit_slow, %function
hook_submit_slow:
    stp x29, x30, [sp, #-224]!
    mov x29, sp
    SAVED(stp, str)
    mov x0, x16
    bl hook_submit_resolve
    mov x16, x0
    SAVED(ldp, ldr)
    ldp x29, x30, [sp], #224
    cbz x16, 2f
    br x16
2:  mov w0, #3
    ret
    .size hook_submit_slow, .-hook_submit_slow

POOL_BEGIN(6)
    COUNT
    adrp x16, hook_submit_pool_real + 8 * k
    ldr x16, [x16, #:lo12:hook_submit_pool_real + 8 * k]
    br x16
POOL_END

#else
#error "libcucache's submission trampolines are written for x86_64 and aarch64"
#endif
    .section .note.GNU-stack, "", %progbits
