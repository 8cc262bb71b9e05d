/*
 * Counting trampolines for the driver entry points that submit work
 * (interpose/submit.c says what they count and why it is exact).
 *
 * Each exported trampoline, named like the driver's entry point it stands
 * for (submit_table.h's HOOK_SUBMIT_EXPORTS), adds one to its thread's
 * count (hook_submit_self, a plain add: only the thread writes it), moves
 * the epoch (hook_submit_epoch) on when it reads odd, and jumps to the
 * driver's function with every argument register and the stack as the
 * caller left them: any prototype, stack arguments included, and no frame
 * of ours on the way.  The slow path (a thread not yet listed, or the
 * driver's address not yet resolved) saves the argument registers around
 * hook_submit_slow_path, which does the same in C.  A pool of anonymous
 * trampolines does the same for addresses cuGetProcAddress gives that are
 * no exported symbol's (hook_submit_pool_real[k]).
 */
#include "submit_sim.h"
#include "submit_table.h"

#define HOOK_SUBMIT_POOL 64

/* The calling thread's record (submit.c's submit_thread_t): its count at
 * offset 0, its state at offset SELF_STATE, SELF_LISTED when the
 * trampolines count inline. */
#define SELF_STATE 8
#define SELF_LISTED 1

/* The pool, HOOK_SUBMIT_POOL trampolines, k-th at hook_submit_pool +
 * k * HOOK_SUBMIT_POOL_STRIDE (submit.c): 1 << stride_log2 (.org fails the
 * build if one is longer).  Between POOL_BEGIN and POOL_END, trampoline k
 * jumps through hook_submit_pool_real[k], set before its address is handed
 * out. */
#define POOL_BEGIN(stride_log2)                                                                                        \
    .globl hook_submit_pool;                                                                                           \
    .hidden hook_submit_pool;                                                                                          \
    .p2align 6;                                                                                                        \
    hook_submit_pool:                                                                                                  \
    .set pool_stride, 1 << stride_log2;                                                                                \
    .set k, 0;                                                                                                         \
    .rept HOOK_SUBMIT_POOL
#define POOL_END                                                                                                       \
    .org hook_submit_pool + (k + 1) * pool_stride;                                                                     \
    .set k, k + 1;                                                                                                     \
    .endr

#if defined(__x86_64__)

#if defined(__CET__)
#define ENDBR endbr64;
#else
#define ENDBR
#endif

/* With the driver's function in r10: when this thread is listed, adds one
 * to its count, moves an odd epoch on (hook_submit_bump) and jumps to r10;
 * otherwise goes to `slow`.  Clobbers r11 and the flags, no argument
 * register. */
#define COUNT_AND_GO(slow)                                                                                             \
    movq hook_submit_self@gottpoff(%rip), %r11;                                                                       \
    cmpb $SELF_LISTED, %fs:SELF_STATE(%r11);                                                                           \
    jne slow;                                                                                                          \
    incq %fs:(%r11);                                                                                                   \
    testb $1, hook_submit_epoch(%rip);                                                                                 \
    jnz hook_submit_bump;                                                                                              \
    jmp *%r10

#define TRAMP(name)                                                                                                    \
    .globl name;                                                                                                       \
    .type name, @function;                                                                                             \
    .p2align 4;                                                                                                        \
    name:                                                                                                              \
    ENDBR                                                                                                              \
    movq hook_submit_real_##name(%rip), %r10;                                                                          \
    testq %r10, %r10;                                                                                                  \
    jz 1f;                                                                                                             \
    COUNT_AND_GO(1f);                                                                                                  \
    1: leaq hook_submit_real_##name(%rip), %r11;                                                                      \
    jmp hook_submit_slow;                                                                                              \
    .size name, .- name;

    .text
HOOK_SUBMIT_EXPORTS(TRAMP)
HOOK_SUBMIT_SIM(TRAMP)

/* r10: the driver's function; the epoch read odd.  Moves it on to the next
 * even value, unless another submission did first (the compare-and-swap
 * then fails, and that is as good), and jumps to r10; rax (the vector
 * count of a variadic call) is kept. */
    .p2align 4
    .type hook_submit_bump, @function
hook_submit_bump:
    .cfi_startproc
    pushq %rax
    .cfi_adjust_cfa_offset 8
    movq hook_submit_epoch(%rip), %rax
    testb $1, %al
    jz 1f
    leaq 1(%rax), %r11
    lock cmpxchgq %r11, hook_submit_epoch(%rip)
1:  popq %rax
    .cfi_adjust_cfa_offset -8
    jmp *%r10
    .cfi_endproc
    .size hook_submit_bump, .-hook_submit_bump

/* The vector argument registers hook_submit_slow saves, and their places
 * (X(n, place) for %xmm<n>). */
#define XMM_SLOTS(X) X(0, 0) X(1, 16) X(2, 32) X(3, 48) X(4, 64) X(5, 80) X(6, 96) X(7, 112)
#define XMM_SAVE(n, place) movdqu %xmm##n, place(%rsp);
#define XMM_LOAD(n, place) movdqu place(%rsp), %xmm##n;

/* r11: the trampoline's slot.  Saves the argument registers (and rax, the
 * vector count of a variadic call), has C count the call and give the
 * driver's address, restores them and jumps there; without one, returns
 * CUDA_ERROR_NOT_INITIALIZED (3). */
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
    call hook_submit_slow_path
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

/* 58 bytes each: a stride of 64 */
POOL_BEGIN(6)
    ENDBR
    movq hook_submit_pool_real+8*k(%rip), %r10
    COUNT_AND_GO(1f)
1:  leaq hook_submit_pool_real+8*k(%rip), %r11
    jmp hook_submit_slow
POOL_END

#elif defined(__aarch64__)

/* With the driver's function in x16: when this thread is listed, adds one
 * to its count, moves an odd epoch on (hook_submit_bump) and jumps to x16;
 * otherwise goes to `slow`.  Clobbers x15, x17 and the flags, no argument
 * register. */
#define COUNT_AND_GO(slow)                                                                                             \
    mrs x17, tpidr_el0;                                                                                                \
    adrp x15, :gottprel:hook_submit_self;                                                                              \
    ldr x15, [x15, #:gottprel_lo12:hook_submit_self];                                                                  \
    add x15, x17, x15;                                                                                                 \
    ldrb w17, [x15, #SELF_STATE];                                                                                      \
    cmp w17, #SELF_LISTED;                                                                                             \
    b.ne slow;                                                                                                         \
    ldr x17, [x15];                                                                                                    \
    add x17, x17, #1;                                                                                                  \
    str x17, [x15];                                                                                                    \
    adrp x17, hook_submit_epoch;                                                                                       \
    ldr x17, [x17, #:lo12:hook_submit_epoch];                                                                          \
    tst x17, #1;                                                                                                       \
    b.ne hook_submit_bump;                                                                                             \
    br x16

#define TRAMP(name)                                                                                                    \
    .globl name;                                                                                                       \
    .type name, %function;                                                                                             \
    .p2align 4;                                                                                                        \
    name:                                                                                                              \
    adrp x16, hook_submit_real_##name;                                                                                 \
    ldr x16, [x16, #:lo12:hook_submit_real_##name];                                                                    \
    cbz x16, 1f;                                                                                                       \
    COUNT_AND_GO(1f);                                                                                                  \
    1: adrp x16, hook_submit_real_##name;                                                                             \
    add x16, x16, :lo12:hook_submit_real_##name;                                                                       \
    b hook_submit_slow;                                                                                                \
    .size name, .- name;

    .text
HOOK_SUBMIT_EXPORTS(TRAMP)
HOOK_SUBMIT_SIM(TRAMP)

/* x16: the driver's function; the epoch read odd.  Moves it on to the next
 * even value, unless another submission did first, and jumps to x16
 * (clobbers x9, x15, x17). */
    .p2align 4
    .type hook_submit_bump, %function
hook_submit_bump:
    adrp x15, hook_submit_epoch
    add x15, x15, :lo12:hook_submit_epoch
1:  ldxr x17, [x15]
    tbz x17, #0, 2f
    add x17, x17, #1
    stxr w9, x17, [x15]
    cbnz w9, 1b
    br x16
2:  clrex
    br x16
    .size hook_submit_bump, .-hook_submit_bump

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

/* x16: the trampoline's slot; x0-x7, x8 and q0-q7 saved around the call
 * that counts it and gives the driver's address. */
    .p2align 4
    .type hook_submit_slow, %function
hook_submit_slow:
    stp x29, x30, [sp, #-224]!
    mov x29, sp
    SAVED(stp, str)
    mov x0, x16
    bl hook_submit_slow_path
    mov x16, x0
    SAVED(ldp, ldr)
    ldp x29, x30, [sp], #224
    cbz x16, 2f
    br x16
2:  mov w0, #3
    ret
    .size hook_submit_slow, .-hook_submit_slow

/* 20 instructions each: a stride of 128 */
POOL_BEGIN(7)
    adrp x16, hook_submit_pool_real + 8 * k
    ldr x16, [x16, #:lo12:hook_submit_pool_real + 8 * k]
    COUNT_AND_GO(1f)
1:  adrp x16, hook_submit_pool_real + 8 * k
    add x16, x16, :lo12:hook_submit_pool_real + 8 * k
    b hook_submit_slow
POOL_END

#else
#error "libcucache's submission trampolines are written for x86_64 and aarch64"
#endif
    .section .note.GNU-stack, "", %progbits
