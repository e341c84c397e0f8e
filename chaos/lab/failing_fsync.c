/* A failing disk and a full one, as the process above them sees them. Preloaded
 * (LD_PRELOAD), this makes
 *  - fsync and fdatasync fail with EIO while the file named by SWARM_FSYNC_FAILS_WHEN exists
 *    (a failing disk: what was written may never reach it);
 *  - every write to a regular file (write, pwrite, pwrite64) fail with ENOSPC while the file
 *    named by SWARM_DISK_FULL_WHEN exists (a full disk: sockets and pipes still work);
 * for SQLite and Python alike, and passes them through again once the file is gone.
 * Built by chaos/lab/disk.py with the system's C compiler; used by the lab's disk faults and
 * by tests/agents/test_failing_disk_process.py. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

static int flagged(const char *variable) {
    const char *flag = getenv(variable);
    return flag != NULL && access(flag, F_OK) == 0;
}

static int full(int fd) {
    struct stat st;
    return flagged("SWARM_DISK_FULL_WHEN") && fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
}

int fsync(int fd) {
    static int (*real)(int);
    if (flagged("SWARM_FSYNC_FAILS_WHEN")) { errno = EIO; return -1; }
    if (real == NULL) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    return real(fd);
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (flagged("SWARM_FSYNC_FAILS_WHEN")) { errno = EIO; return -1; }
    if (real == NULL) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    return real(fd);
}

ssize_t write(int fd, const void *buf, size_t count) {
    static ssize_t (*real)(int, const void *, size_t);
    if (full(fd)) { errno = ENOSPC; return -1; }
    if (real == NULL) real = (ssize_t (*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    return real(fd, buf, count);
}

ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) {
    static ssize_t (*real)(int, const void *, size_t, off_t);
    if (full(fd)) { errno = ENOSPC; return -1; }
    if (real == NULL) real = (ssize_t (*)(int, const void *, size_t, off_t))dlsym(RTLD_NEXT, "pwrite");
    return real(fd, buf, count, offset);
}

ssize_t pwrite64(int fd, const void *buf, size_t count, off64_t offset) {
    static ssize_t (*real)(int, const void *, size_t, off64_t);
    if (full(fd)) { errno = ENOSPC; return -1; }
    if (real == NULL) real = (ssize_t (*)(int, const void *, size_t, off64_t))dlsym(RTLD_NEXT, "pwrite64");
    return real(fd, buf, count, offset);
}
