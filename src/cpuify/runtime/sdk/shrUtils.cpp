/* shrUtils.cpp: the functions of cpuify's shrUtils.h (libshrutil_x86_64.a of `cpuify
 * cuda-sdk`), written for cpuify from the GPU Computing SDK's documented API.  Most are
 * cutil's functions (libcutil) under the shr names. */
#include "shrUtils.h"

#include <math.h>
#include <stdarg.h>
#include <time.h>

#include <mutex>

namespace {

std::mutex log_lock;
FILE *log_file = nullptr;

double now_s() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

const int COUNTERS = 8;
double last[COUNTERS];
bool started[COUNTERS];

void log_v(int mode, int err, const char *fmt, va_list ap) {
    std::lock_guard<std::mutex> g(log_lock);
    FILE *console = (mode & ERRORMSG) ? stderr : stdout;
    if (mode & LOGCONSOLE) {
        va_list copy;
        va_copy(copy, ap);
        if (mode & ERRORMSG)
            fprintf(console, "\n !!! Error # %i at ", err);
        vfprintf(console, fmt, copy);
        va_end(copy);
        fflush(console);
    }
    if ((mode & LOGFILE) && log_file) {
        if (mode & ERRORMSG)
            fprintf(log_file, "\n !!! Error # %i at ", err);
        vfprintf(log_file, fmt, ap);
        fflush(log_file);
    }
    if ((mode & CLOSELOG) && log_file) {
        fclose(log_file);
        log_file = nullptr;
    }
}

}  // namespace

extern "C" {

void shrFree(void *ptr) { cutFree(ptr); }

void shrSetLogFileName(const char *name) {
    std::lock_guard<std::mutex> g(log_lock);
    if (log_file)
        fclose(log_file);
    log_file = name ? fopen(name, "w") : nullptr;
    if (name && !log_file)
        fprintf(stderr, "shrSetLogFileName: cannot create '%s'\n", name);
}

void shrLog(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    log_v(LOGBOTH, 0, fmt, ap);
    va_end(ap);
}

void shrLogEx(int mode, int err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    log_v(mode, err, fmt, ap);
    va_end(ap);
}

double shrDeltaT(int counter) {
    if (counter < 0 || counter >= COUNTERS) {
        fprintf(stderr, "shrDeltaT: counter %d is not one of 0..%d\n", counter, COUNTERS - 1);
        return 0.0;
    }
    std::lock_guard<std::mutex> g(log_lock);
    double t = now_s(), delta = started[counter] ? t - last[counter] : 0.0;
    last[counter] = t;
    started[counter] = true;
    return delta;
}

size_t shrRoundUp(int group_size, int global_size) {
    if (group_size <= 0)
        return (size_t)global_size;
    int r = global_size % group_size;
    return (size_t)(r == 0 ? global_size : global_size + group_size - r);
}

const char *cpuify_shr_name(const char *argv0) {
    if (!argv0)
        return "program";
    const char *slash = strrchr(argv0, '/');
    return slash ? slash + 1 : argv0;
}

void cpuify_shr_check(int sample, int reference, void (*cleanup)(int), const char *file, const int line) {
    if (sample == reference)
        return;
    fflush(stdout);
    fprintf(stderr, "%s(%d) : shrCheckError: %d, expected %d\n", file, line, sample, reference);
    if (cleanup)
        cleanup(EXIT_FAILURE);
    exit(EXIT_FAILURE);
}

char *shrFindFilePath(const char *f, const char *exe) { return cutFindFilePath(f, exe); }

shrBOOL shrReadFilef(const char *f, float **d, unsigned *n, bool v) { return cutReadFilef(f, d, n, v); }
shrBOOL shrReadFiled(const char *f, double **d, unsigned *n, bool v) { return cutReadFiled(f, d, n, v); }
shrBOOL shrReadFilei(const char *f, int **d, unsigned *n, bool v) { return cutReadFilei(f, d, n, v); }
shrBOOL shrReadFileui(const char *f, unsigned **d, unsigned *n, bool v) { return cutReadFileui(f, d, n, v); }
shrBOOL shrReadFileb(const char *f, char **d, unsigned *n, bool v) { return cutReadFileb(f, d, n, v); }
shrBOOL shrReadFileub(const char *f, unsigned char **d, unsigned *n, bool v) { return cutReadFileub(f, d, n, v); }
shrBOOL shrWriteFilef(const char *f, const float *d, unsigned n, const float e, bool v) { return cutWriteFilef(f, d, n, e, v); }
shrBOOL shrWriteFiled(const char *f, const double *d, unsigned n, const double e, bool v) { return cutWriteFiled(f, d, n, e, v); }
shrBOOL shrWriteFilei(const char *f, const int *d, unsigned n, bool v) { return cutWriteFilei(f, d, n, v); }
shrBOOL shrWriteFileui(const char *f, const unsigned *d, unsigned n, bool v) { return cutWriteFileui(f, d, n, v); }
shrBOOL shrWriteFileb(const char *f, const char *d, unsigned n, bool v) { return cutWriteFileb(f, d, n, v); }
shrBOOL shrWriteFileub(const char *f, const unsigned char *d, unsigned n, bool v) { return cutWriteFileub(f, d, n, v); }
shrBOOL shrLoadPPM4ub(const char *f, unsigned char **d, unsigned *w, unsigned *h) { return cutLoadPPM4ub(f, d, w, h); }
shrBOOL shrSavePPM4ub(const char *f, unsigned char *d, unsigned w, unsigned h) { return cutSavePPM4ub(f, d, w, h); }
shrBOOL shrLoadPGMub(const char *f, unsigned char **d, unsigned *w, unsigned *h) { return cutLoadPGMub(f, d, w, h); }
shrBOOL shrSavePGMub(const char *f, unsigned char *d, unsigned w, unsigned h) { return cutSavePGMub(f, d, w, h); }

shrBOOL shrCheckCmdLineFlag(const int argc, const char **argv, const char *name) { return cutCheckCmdLineFlag(argc, argv, name); }
shrBOOL shrGetCmdLineArgumenti(const int argc, const char **argv, const char *name, int *val) { return cutGetCmdLineArgumenti(argc, argv, name, val); }
shrBOOL shrGetCmdLineArgumentf(const int argc, const char **argv, const char *name, float *val) { return cutGetCmdLineArgumentf(argc, argv, name, val); }
shrBOOL shrGetCmdLineArgumentstr(const int argc, const char **argv, const char *name, char **val) { return cutGetCmdLineArgumentstr(argc, argv, name, val); }
shrBOOL shrGetCmdLineArgumentListstr(const int argc, const char **argv, const char *name, char ***val, unsigned *len) {
    return cutGetCmdLineArgumentListstr(argc, argv, name, val, len);
}
shrBOOL shrGetCmdLineArgumentu(const int argc, const char **argv, const char *name, unsigned *val) {
    char *text = nullptr;
    if (!cutGetCmdLineArgumentstr(argc, argv, name, &text))
        return shrFALSE;
    char *end;
    unsigned long long v = strtoull(text, &end, 10);
    if (*end != '\0' || end == text || text[0] == '-' || v > 0xffffffffull) {
        fprintf(stderr, "cutil: command-line argument --%s=%s is not a whole number >= 0\n", name, text);
        exit(EXIT_FAILURE);
    }
    *val = (unsigned)v;
    return shrTRUE;
}

shrBOOL shrComparef(const float *r, const float *d, const unsigned n) { return cutComparef(r, d, n); }
shrBOOL shrComparei(const int *r, const int *d, const unsigned n) { return cutComparei(r, d, n); }
shrBOOL shrCompareuit(const unsigned *r, const unsigned *d, const unsigned n, const float e, const float t) { return cutCompareuit(r, d, n, e, t); }
shrBOOL shrCompareub(const unsigned char *r, const unsigned char *d, const unsigned n) { return cutCompareub(r, d, n); }
shrBOOL shrCompareubt(const unsigned char *r, const unsigned char *d, const unsigned n, const float e, const float t) { return cutCompareubt(r, d, n, e, t); }
shrBOOL shrCompareube(const unsigned char *r, const unsigned char *d, const unsigned n, const int e) { return cutCompareube(r, d, n, e); }
shrBOOL shrComparefe(const float *r, const float *d, const unsigned n, const float e) { return cutComparefe(r, d, n, e); }
shrBOOL shrComparefet(const float *r, const float *d, const unsigned n, const float e, const float t) { return cutComparefet(r, d, n, e, t); }
shrBOOL shrCompareL2fe(const float *r, const float *d, const unsigned n, const float e) { return cutCompareL2fe(r, d, n, e); }
shrBOOL shrComparePPM(const char *s, const char *r, const float e, const float t) { return cutComparePPM(s, r, e, t, false); }
shrBOOL shrComparePGM(const char *s, const char *r, const float e, const float t) { return cutComparePPM(s, r, e, t, false); }

}  // extern "C"
