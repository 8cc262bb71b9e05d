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

#if defined(__x86_64__)

#if defined(__CET__)
#define ENDBR endbr64;
#else
#define ENDBR
#endif

#define TRAMP(name)                                                                                                    \
    .globl name;                                                                                                       \
    .type name, @function;                                                                                             \
    .p2align 4;                                                                                                        \
    name:                                                                                                              \
    ENDBR                                                                                                              \
    lock incq hook_submissions(%rip);                                                                                  \
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
    movdqu %xmm0, 0(%rsp)
    movdqu %xmm1, 16(%rsp)
    movdqu %xmm2, 32(%rsp)
    movdqu %xmm3, 48(%rsp)
    movdqu %xmm4, 64(%rsp)
    movdqu %xmm5, 80(%rsp)
    movdqu %xmm6, 96(%rsp)
    movdqu %xmm7, 112(%rsp)
    movq %r11, %rdi
    call hook_submit_resolve
    movq %rax, %r11
    movdqu 0(%rsp), %xmm0
    movdqu 16(%rsp), %xmm1
    movdqu 32(%rsp), %xmm2
    movdqu 48(%rsp), %xmm3
    movdqu 64(%rsp), %xmm4
    movdqu 80(%rsp), %xmm5
    movdqu 96(%rsp), %xmm6
    movdqu 112(%rsp), %xmm7
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

/* The pool: trampoline k jumps through hook_submit_pool_real[k], set
 * before its address is handed out. */
    .globl hook_submit_pool
    .hidden hook_submit_pool
    .p2align 6
hook_submit_pool:
    .set k, 0
    .rept HOOK_SUBMIT_POOL
    .p2align 5 /* HOOK_SUBMIT_POOL_STRIDE (submit.c) */
    ENDBR
    lock incq hook_submissions(%rip)
    jmp *hook_submit_pool_real+8*k(%rip)
    .set k, k + 1
    .endr

#elif defined(__aarch64__)

#define TRAMP(name)                                                                                                    \
    .globl name;                                                                                                       \
    .type name, %function;                                                                                             \
    .p2align 4;                                                                                                        \
    name:                                                                                                              \
    adrp x16, hook_submissions;                                                                                        \
    add x16, x16, :lo12:hook_submissions;                                                                              \
    1: ldxr x17, [x16];                                                                                               \
    add x17, x17, #1;                                                                                                  \
    stxr w15, x17, [x16];                                                                                              \
    cbnz w15, 1b;                                                                                                      \
    adrp x16, hook_submit_real_##name;                                                                                 \
    add x16, x16, :lo12:hook_submit_real_##name;                                                                       \
    ldr x17, [x16];                                                                                                    \
    cbz x17, hook_submit_slow;                                                                                         \
    br x17;                                                                                                            \
    .size name, .- name;

    .text
HOOK_SUBMIT_EXPORTS(TRAMP)
HOOK_SUBMIT_SIM(TRAMP)

/* x16: the slot to fill; x0-x7 and q0-q7 saved around the call. */
    .p2align 4
    .type hook_submit_slow, %function
hook_submit_slow:
    stp x29, x30, [sp, #-224]!
    mov x29, sp
    stp x0, x1, [sp, #16]
    stp x2, x3, [sp, #32]
    stp x4, x5, [sp, #48]
    stp x6, x7, [sp, #64]
    stp q0, q1, [sp, #80]
    stp q2, q3, [sp, #112]
    stp q4, q5, [sp, #144]
    stp q6, q7, [sp, #176]
    str x8, [sp, #208]
    mov x0, x16
    bl hook_submit_resolve
    mov x16, x0
    ldp x0, x1, [sp, #16]
    ldp x2, x3, [sp, #32]
    ldp x4, x5, [sp, #48]
    ldp x6, x7, [sp, #64]
    ldp q0, q1, [sp, #80]
    ldp q2, q3, [sp, #112]
    ldp q4, q5, [sp, #144]
    ldp q6, q7, [sp, #176]
    ldr x8, [sp, #208]
    ldp x29, x30, [sp], #224
    cbz x16, 2f
    br x16
2:  mov w0, #3
    ret
    .size hook_submit_slow, .-hook_submit_slow

    .globl hook_submit_pool
    .hidden hook_submit_pool
    .p2align 6
hook_submit_pool:
    .set k, 0
    .rept HOOK_SUBMIT_POOL
    .p2align 6 /* HOOK_SUBMIT_POOL_STRIDE (submit.c) */
    adrp x16, hook_submissions
    add x16, x16, :lo12:hook_submissions
3:  ldxr x17, [x16]
    add x17, x17, #1
    stxr w15, x17, [x16]
    cbnz w15, 3b
    adrp x16, hook_submit_pool_real + 8 * k
    ldr x16, [x16, #:lo12:hook_submit_pool_real + 8 * k]
    br x16
    .set k, k + 1
    .endr

#else
#error "libcucache's submission trampolines are written for x86_64 and aarch64"
#endif
    .section .note.GNU-stack, "", %progbits
