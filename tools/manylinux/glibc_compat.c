/* Stand-ins for the glibc symbols newer than 2.28 that have no older version
 * to pin to (see tools/manylinux/toolchain.py). The toolchain compiles this
 * file once per symbol, with -DDRAGON_COMPAT_<symbol>, into its own archive
 * member named __wrap_<symbol>; `-Wl,--wrap=<symbol>` sends the references
 * of a library here, so a member is linked only where the symbol is used.
 * Each stand-in does what glibc's does, within what glibc 2.28 offers. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/random.h>

#define HIDDEN __attribute__((visibility("hidden")))

#ifdef DRAGON_COMPAT___libc_single_threaded
/* glibc 2.32's flag lets libstdc++ skip atomic reference counting while a
 * process has one thread. Always 0 ("maybe several threads"): the atomic
 * path, which is correct in every process. */
HIDDEN char __wrap___libc_single_threaded = 0;
#endif

#ifdef DRAGON_COMPAT_pthread_cond_clockwait
/* glibc 2.30 (std::condition_variable::wait_for/wait_until on the steady
 * clock). A default condition variable measures pthread_cond_timedwait's
 * deadline on CLOCK_REALTIME: a CLOCK_MONOTONIC deadline is turned into a
 * realtime one, as libstdc++ itself does where glibc lacks the call. */
HIDDEN int __wrap_pthread_cond_clockwait(pthread_cond_t *cond, pthread_mutex_t *mutex,
                                         clockid_t clock, const struct timespec *abstime) {
  if (clock == CLOCK_REALTIME) return pthread_cond_timedwait(cond, mutex, abstime);
  if (clock != CLOCK_MONOTONIC) return EINVAL;
  struct timespec mono, real;
  clock_gettime(CLOCK_MONOTONIC, &mono);
  clock_gettime(CLOCK_REALTIME, &real);
  int64_t ns = (int64_t)(abstime->tv_sec - mono.tv_sec) * 1000000000 +
               (abstime->tv_nsec - mono.tv_nsec);
  if (ns < 0) ns = 0;
  int64_t when = (int64_t)real.tv_nsec + ns % 1000000000;
  struct timespec deadline = {real.tv_sec + (time_t)(ns / 1000000000) + (time_t)(when / 1000000000),
                              (long)(when % 1000000000)};
  return pthread_cond_timedwait(cond, mutex, &deadline);
}
#endif

#ifdef DRAGON_COMPAT_arc4random
/* glibc 2.36 (libstdc++'s std::random_device): kernel randomness through
 * getentropy (glibc 2.25), as glibc's arc4random; like it, never fails. */
HIDDEN uint32_t __wrap_arc4random(void) {
  uint32_t v;
  while (getentropy(&v, sizeof v) != 0) {
    if (errno != EINTR) abort();
  }
  return v;
}
#endif

/* glibc 2.33 made the stat family real functions; before, <sys/stat.h>
 * turned each call into __xstat64 & co (glibc 2.2.5, still exported) with
 * the kernel's struct layout version, which on x86-64 is 1. */
#if defined(DRAGON_COMPAT_fstat64) || defined(DRAGON_COMPAT_fstat) ||   \
    defined(DRAGON_COMPAT_stat64) || defined(DRAGON_COMPAT_stat) ||     \
    defined(DRAGON_COMPAT_lstat64) || defined(DRAGON_COMPAT_lstat) ||   \
    defined(DRAGON_COMPAT_fstatat64) || defined(DRAGON_COMPAT_fstatat)
#include <sys/stat.h>
#ifndef __x86_64__
#error "the stat stand-ins know the x86-64 struct stat version only"
#endif
#define DRAGON_STAT_VER 1
extern int __xstat64(int, const char *, struct stat64 *);
extern int __lxstat64(int, const char *, struct stat64 *);
extern int __fxstat64(int, int, struct stat64 *);
extern int __fxstatat64(int, int, const char *, struct stat64 *, int);
#endif
/* On x86-64 struct stat and struct stat64 are one layout. */
#ifdef DRAGON_COMPAT_fstat64
HIDDEN int __wrap_fstat64(int fd, struct stat64 *st) {
  return __fxstat64(DRAGON_STAT_VER, fd, st);
}
#endif
#ifdef DRAGON_COMPAT_fstat
HIDDEN int __wrap_fstat(int fd, struct stat *st) {
  return __fxstat64(DRAGON_STAT_VER, fd, (struct stat64 *)st);
}
#endif
#ifdef DRAGON_COMPAT_stat64
HIDDEN int __wrap_stat64(const char *path, struct stat64 *st) {
  return __xstat64(DRAGON_STAT_VER, path, st);
}
#endif
#ifdef DRAGON_COMPAT_stat
HIDDEN int __wrap_stat(const char *path, struct stat *st) {
  return __xstat64(DRAGON_STAT_VER, path, (struct stat64 *)st);
}
#endif
#ifdef DRAGON_COMPAT_lstat64
HIDDEN int __wrap_lstat64(const char *path, struct stat64 *st) {
  return __lxstat64(DRAGON_STAT_VER, path, st);
}
#endif
#ifdef DRAGON_COMPAT_lstat
HIDDEN int __wrap_lstat(const char *path, struct stat *st) {
  return __lxstat64(DRAGON_STAT_VER, path, (struct stat64 *)st);
}
#endif
#ifdef DRAGON_COMPAT_fstatat64
HIDDEN int __wrap_fstatat64(int dirfd, const char *path, struct stat64 *st, int flags) {
  return __fxstatat64(DRAGON_STAT_VER, dirfd, path, st, flags);
}
#endif
#ifdef DRAGON_COMPAT_fstatat
HIDDEN int __wrap_fstatat(int dirfd, const char *path, struct stat *st, int flags) {
  return __fxstatat64(DRAGON_STAT_VER, dirfd, path, (struct stat64 *)st, flags);
}
#endif
