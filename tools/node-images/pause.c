/* The pod sandbox ("pause") process of the local cluster's real nodes: it holds the pod's
 * namespaces, reaps the zombies it inherits, and exits on SIGTERM or SIGINT. Linked
 * statically, so that its image is this one file (tools/node-images/build.sh). */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig) { (void)sig; _exit(0); }

static void on_child(int sig) {
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(void) {
    struct sigaction stop = {.sa_handler = on_stop};
    struct sigaction child = {.sa_handler = on_child, .sa_flags = SA_NOCLDSTOP | SA_RESTART};
    if (sigaction(SIGTERM, &stop, NULL) || sigaction(SIGINT, &stop, NULL) || sigaction(SIGCHLD, &child, NULL))
        return 1;
    for (;;)
        pause();
}
