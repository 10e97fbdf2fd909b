/* A statically linked program that waits to be ended: the sandbox gives
 * such a program no host system paths (test_runtime.c). */
#include <unistd.h>

int main(void)
{
    for (;;)
        pause();
}
