/*
 * A library without symbols (built stripped, without debug information)
 * that calls back into the program: stacks_child's allocations through it
 * unwind through a frame that has no name, as a stripped vendor library's
 * would.  Only the getter is exported; the frame that shows is the static
 * function it returns.
 */
typedef void (*stacks_fn)(int);

__attribute__((noinline)) static void through(stacks_fn fn, int n)
{
    fn(n);
    __asm__ volatile("" ::: "memory"); /* no tail call: this frame stays on the stack */
}

__attribute__((visibility("default"))) void (*stacks_stripped_entry(void))(stacks_fn, int);

void (*stacks_stripped_entry(void))(stacks_fn, int)
{
    return through;
}
