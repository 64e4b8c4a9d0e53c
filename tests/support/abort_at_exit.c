/* A library that crashes the teardown of any process that loaded it: its destructor calls abort() when the
   process ends through exit(), as an interpreter's teardown does, the point where gloo's threads now and then
   abort a rank whose script ended well ("terminate called without an active exception"). os._exit() runs no
   destructor. Built by tests/support/teardown_crash.py. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((destructor)) static void abort_in_teardown(void) {
    fputs("abort_at_exit: abort() in the process's teardown\n", stderr);
    abort();
}

/* A crash before the script returned. */
void abort_now(void) { abort(); }

/* Text into C's stdout buffer, left there: what a library prints with printf (a pipe's stdout is flushed when
   the buffer fills, or at exit). */
void say_buffered(const char *text) { fputs(text, stdout); }
