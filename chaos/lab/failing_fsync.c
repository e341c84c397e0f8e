/* A failing disk, as the process under it sees one: preloaded (LD_PRELOAD), it makes libc's
 * fsync and fdatasync fail with EIO, for SQLite and Python alike, from the moment the file
 * named by SWARM_FSYNC_FAILS_WHEN exists, and pass them through again once it is gone.
 * Built by chaos/lab/disk.py with the system's C compiler; used by the lab's `disk_fails`
 * fault and by tests/agents/test_failing_disk_process.py. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

static int failing(void) {
    const char *flag = getenv("SWARM_FSYNC_FAILS_WHEN");
    return flag != NULL && access(flag, F_OK) == 0;
}

int fsync(int fd) {
    static int (*real)(int);
    if (failing()) { errno = EIO; return -1; }
    if (real == NULL) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    return real(fd);
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (failing()) { errno = EIO; return -1; }
    if (real == NULL) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    return real(fd);
}
