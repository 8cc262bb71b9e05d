/*
 * libcucache's dlsym.  Lookups of a hooked CUDA driver name return the hook
 * (hook_dlsym_find in hook_lookup.c); every other lookup continues in the C
 * library's dlsym by a tail jump, with the caller's return address still on
 * the stack, because dlsym(RTLD_NEXT, ...) resolves relative to the object
 * that called it.  Forwarding with an ordinary call would make every such
 * lookup relative to libcucache instead: LLVM OpenMP's
 * dlsym(RTLD_NEXT, "ompt_start_tool") then finds itself and spins
 * (HAMi issue 2903, fixed the same way in HAMi-core PR 315).
 */
#if defined(__x86_64__)
    .text
    .globl dlsym
    .type dlsym, @function
    .p2align 4
dlsym:
    .cfi_startproc
#if defined(__CET__)
    endbr64
#endif
    pushq %rdi
    .cfi_adjust_cfa_offset 8
    pushq %rsi
    .cfi_adjust_cfa_offset 8
    subq $8, %rsp                   /* 16-byte alignment for the call */
    .cfi_adjust_cfa_offset 8
    call hook_dlsym_find
    addq $8, %rsp
    .cfi_adjust_cfa_offset -8
    popq %rsi
    .cfi_adjust_cfa_offset -8
    popq %rdi
    .cfi_adjust_cfa_offset -8
    testq %rax, %rax
    jz 1f
    ret
1:  jmp *hook_real_dlsym(%rip)
    .cfi_endproc
    .size dlsym, .-dlsym
#elif defined(__aarch64__)
    .text
    .globl dlsym
    .type dlsym, %function
    .p2align 4
dlsym:
    .cfi_startproc
    stp x29, x30, [sp, #-32]!
    .cfi_def_cfa_offset 32
    .cfi_offset 29, -32
    .cfi_offset 30, -24
    mov x29, sp
    stp x0, x1, [sp, #16]
    bl hook_dlsym_find
    cbz x0, 1f
    ldp x29, x30, [sp], #32
    .cfi_remember_state
    .cfi_def_cfa_offset 0
    ret
1:  .cfi_restore_state
    ldp x0, x1, [sp, #16]
    ldp x29, x30, [sp], #32
    .cfi_def_cfa_offset 0
    adrp x16, hook_real_dlsym
    ldr x16, [x16, #:lo12:hook_real_dlsym]
    br x16
    .cfi_endproc
    .size dlsym, .-dlsym
#else
#error "libcucache's dlsym entry is written for x86_64 and aarch64"
#endif
    .section .note.GNU-stack, "", %progbits
