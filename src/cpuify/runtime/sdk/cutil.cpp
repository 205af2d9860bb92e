/* cutil.cpp: the functions of cpuify's cutil.h (libcutil_x86_64.a of `cpuify cuda-sdk`), the
 * utility library of NVIDIA's GPU Computing SDK, written for cpuify from its documented API.
 * Plain host code: nothing here touches the CUDA runtime. */
#include "cutil.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <mutex>
#include <string>
#include <vector>

namespace {

void report(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cutil: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

// ---- timers ------------------------------------------------------------------------------

struct Timer {
    bool live = false;        // created and not deleted
    bool running = false;
    double started = 0;       // ms, when running
    double total = 0;         // ms of the finished intervals (since the last reset)
    unsigned intervals = 0;   // finished intervals (since the last reset)
};

std::mutex timers_lock;
std::vector<Timer> timers;    // name n is timers[n - 1]: 0 is never a timer's name

double now_ms() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

Timer *timer_of(unsigned name, const char *fn) {
    if (name == 0 || name > timers.size() || !timers[name - 1].live) {
        report("%s: %u is not a timer made by cutCreateTimer (or it was deleted)", fn, name);
        return nullptr;
    }
    return &timers[name - 1];
}

// ---- the command line --------------------------------------------------------------------

// the value of `--name=value` / `-name=value` ("" for `--name`), or nullptr
const char *argument(int argc, const char **argv, const char *name) {
    size_t n = strlen(name);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!a || a[0] != '-')
            continue;
        a += (a[1] == '-') ? 2 : 1;
        if (strncmp(a, name, n) == 0 && (a[n] == '\0' || a[n] == '='))
            return a[n] == '=' ? a + n + 1 : a + n;
    }
    return nullptr;
}

[[noreturn]] void bad_argument(const char *name, const char *value, const char *what) {
    fprintf(stderr, "cutil: command-line argument --%s=%s is not %s\n", name, value, what);
    exit(EXIT_FAILURE);
}

// ---- files of numbers --------------------------------------------------------------------

template <class T> bool parse(const char *tok, T *out);
template <> bool parse(const char *tok, float *out) {
    char *end; errno = 0; *out = strtof(tok, &end); return *end == '\0' && end != tok;
}
template <> bool parse(const char *tok, double *out) {
    char *end; errno = 0; *out = strtod(tok, &end); return *end == '\0' && end != tok;
}
template <class T> bool parse_integer(const char *tok, T *out, long long lo, long long hi) {
    char *end; errno = 0;
    long long v = strtoll(tok, &end, 10);
    if (*end != '\0' || end == tok || errno || v < lo || v > hi)
        return false;
    *out = (T)v;
    return true;
}
template <> bool parse(const char *tok, int *out) { return parse_integer(tok, out, INT_MIN, INT_MAX); }
template <> bool parse(const char *tok, unsigned *out) { return parse_integer(tok, out, 0, UINT_MAX); }
template <> bool parse(const char *tok, char *out) { return parse_integer(tok, out, CHAR_MIN, CHAR_MAX); }
template <> bool parse(const char *tok, unsigned char *out) { return parse_integer(tok, out, 0, UCHAR_MAX); }

template <class T>
CUTBoolean read_file(const char *fn, const char *filename, T **data, unsigned *len, bool verbose) {
    if (!filename || !data || !len) {
        report("%s: a NULL argument", fn);
        return CUTFalse;
    }
    FILE *f = fopen(filename, "r");
    if (!f) {
        report("%s: cannot open '%s': %s", fn, filename, strerror(errno));
        return CUTFalse;
    }
    std::vector<T> values;
    char line[4096];
    unsigned lineno = 0;
    bool ok = true;
    std::string pending;      // a line longer than the buffer
    while (ok && fgets(line, sizeof line, f)) {
        pending += line;
        if (!pending.empty() && pending.back() != '\n' && !feof(f))
            continue;
        lineno++;
        size_t start = pending.find_first_not_of(" \t\r\n");
        if (start != std::string::npos && pending[start] != '#') {
            char *text = &pending[0];
            for (char *tok = strtok(text, " \t\r\n,"); tok; tok = strtok(nullptr, " \t\r\n,")) {
                T v;
                if (!parse(tok, &v)) {
                    report("%s: '%s' line %u: '%s' is not a value of the expected type", fn,
                           filename, lineno, tok);
                    ok = false;
                    break;
                }
                values.push_back(v);
            }
        }
        pending.clear();
    }
    if (ok && ferror(f)) {
        report("%s: reading '%s': %s", fn, filename, strerror(errno));
        ok = false;
    }
    fclose(f);
    if (!ok)
        return CUTFalse;
    if (*data) {
        if (*len != values.size()) {
            report("%s: '%s' holds %zu values, the array given has %u", fn, filename,
                   values.size(), *len);
            return CUTFalse;
        }
    } else {
        *data = (T *)malloc(values.empty() ? 1 : values.size() * sizeof(T));
        if (!*data) {
            report("%s: out of memory for %zu values", fn, values.size());
            return CUTFalse;
        }
        *len = (unsigned)values.size();
    }
    if (!values.empty())
        memcpy(*data, values.data(), values.size() * sizeof(T));
    if (verbose)
        fprintf(stderr, "cutil: read %u values from '%s'\n", *len, filename);
    return CUTTrue;
}

template <class T>
CUTBoolean write_file(const char *fn, const char *filename, const T *data, unsigned len,
                      double epsilon, bool verbose, const char *format) {
    if (!filename || (!data && len)) {
        report("%s: a NULL argument", fn);
        return CUTFalse;
    }
    FILE *f = fopen(filename, "w");
    if (!f) {
        report("%s: cannot create '%s': %s", fn, filename, strerror(errno));
        return CUTFalse;
    }
    fprintf(f, "# %g\n", epsilon);
    for (unsigned i = 0; i < len; i++)
        fprintf(f, format, data[i]);
    bool ok = !ferror(f);
    ok = (fclose(f) == 0) && ok;
    if (!ok) {
        report("%s: writing '%s' failed", fn, filename);
        return CUTFalse;
    }
    if (verbose)
        fprintf(stderr, "cutil: wrote %u values to '%s'\n", len, filename);
    return CUTTrue;
}

// digits enough that a value read back is within epsilon: all of them for epsilon 0
int digits_for(double epsilon, int all) {
    if (!(epsilon > 0))
        return all;
    int d = (int)ceil(-log10(epsilon)) + 1;
    return d < 1 ? 1 : d > all ? all : d;
}

// ---- images ------------------------------------------------------------------------------

// the next header number of a PNM file, skipping whitespace and # comments
bool pnm_number(FILE *f, unsigned *out) {
    int c = fgetc(f);
    for (;;) {
        while (c == ' ' || c == '\t' || c == '\r' || c == '\n')
            c = fgetc(f);
        if (c != '#')
            break;
        while (c != '\n' && c != EOF)
            c = fgetc(f);
    }
    if (c < '0' || c > '9')
        return false;
    unsigned long v = 0;
    while (c >= '0' && c <= '9') {
        v = v * 10 + (c - '0');
        if (v > 1u << 30)
            return false;
        c = fgetc(f);
    }
    *out = (unsigned)v;
    return true;     // the one whitespace byte after the last number is consumed
}

// the pixels of a P5 (channels 1) or P6 (channels 3) file as bytes
bool load_pnm(const char *fn, const char *file, unsigned channels, std::vector<unsigned char> &pixels,
              unsigned *w, unsigned *h) {
    FILE *f = fopen(file, "rb");
    if (!f) {
        report("%s: cannot open '%s': %s", fn, file, strerror(errno));
        return false;
    }
    char magic[3] = {0, 0, 0};
    unsigned width = 0, height = 0, maxval = 0;
    bool ok = fread(magic, 1, 2, f) == 2 && pnm_number(f, &width) && pnm_number(f, &height) &&
              pnm_number(f, &maxval);
    const char *want = channels == 1 ? "P5" : "P6";
    if (!ok || strcmp(magic, want) != 0 || maxval == 0 || maxval > 255 || !width || !height) {
        report("%s: '%s' is not a binary %s file with 8-bit values (a '%s' header, width, "
               "height and a maximum of at most 255)", fn, file,
               channels == 1 ? "PGM" : "PPM", want);
        fclose(f);
        return false;
    }
    pixels.resize((size_t)width * height * channels);
    if (fread(pixels.data(), 1, pixels.size(), f) != pixels.size()) {
        report("%s: '%s' ends before its %ux%u pixels", fn, file, width, height);
        fclose(f);
        return false;
    }
    fclose(f);
    *w = width;
    *h = height;
    return true;
}

template <class T>
CUTBoolean load_image(const char *fn, const char *file, T **data, unsigned *w, unsigned *h,
                      unsigned file_channels, unsigned channels) {
    if (!file || !data || !w || !h) {
        report("%s: a NULL argument", fn);
        return CUTFalse;
    }
    std::vector<unsigned char> pixels;
    unsigned width, height;
    if (!load_pnm(fn, file, file_channels, pixels, &width, &height))
        return CUTFalse;
    if (*data) {
        if (*w != width || *h != height) {
            report("%s: '%s' is %ux%u, the array given is for %ux%u", fn, file, width, height,
                   *w, *h);
            return CUTFalse;
        }
    } else {
        *data = (T *)malloc((size_t)width * height * channels * sizeof(T));
        if (!*data) {
            report("%s: out of memory for %ux%u pixels", fn, width, height);
            return CUTFalse;
        }
        *w = width;
        *h = height;
    }
    size_t n = (size_t)width * height;
    for (size_t p = 0; p < n; p++)
        for (unsigned c = 0; c < channels; c++)
            (*data)[p * channels + c] = c < file_channels ? (T)pixels[p * file_channels + c] : (T)0;
    return CUTTrue;
}

template <class T>
CUTBoolean save_image(const char *fn, const char *file, const T *data, unsigned w, unsigned h,
                      unsigned file_channels, unsigned channels) {
    if (!file || !data) {
        report("%s: a NULL argument", fn);
        return CUTFalse;
    }
    FILE *f = fopen(file, "wb");
    if (!f) {
        report("%s: cannot create '%s': %s", fn, file, strerror(errno));
        return CUTFalse;
    }
    fprintf(f, "%s\n%u %u\n255\n", file_channels == 1 ? "P5" : "P6", w, h);
    size_t n = (size_t)w * h;
    std::vector<unsigned char> row((size_t)w * file_channels);
    bool ok = true;
    for (size_t y = 0; ok && y < h; y++) {
        for (size_t x = 0; x < w; x++) {
            size_t p = y * w + x;
            for (unsigned c = 0; c < file_channels; c++) {
                double v = (double)data[p * channels + c];
                row[x * file_channels + c] = (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
        }
        ok = fwrite(row.data(), 1, row.size(), f) == row.size();
    }
    (void)n;
    ok = (fclose(f) == 0) && ok;
    if (!ok) {
        report("%s: writing '%s' failed", fn, file);
        return CUTFalse;
    }
    return CUTTrue;
}

// ---- comparisons -------------------------------------------------------------------------

template <class T>
CUTBoolean compare(const char *fn, const T *reference, const T *data, unsigned len,
                   double epsilon, double threshold) {
    if (!reference || !data) {
        report("%s: a NULL array", fn);
        return CUTFalse;
    }
    unsigned long long differ = 0;
    long long first = -1;
    for (unsigned i = 0; i < len; i++) {
        double diff = fabs((double)reference[i] - (double)data[i]);
        if (!(diff <= epsilon)) {        // a NaN differs too
            if (first < 0)
                first = i;
            differ++;
        }
    }
    if (differ == 0 || (threshold > 0 && (double)differ <= threshold * len))
        return CUTTrue;
    fprintf(stderr, "%s: %llu of %u elements differ by more than %g (the first at index %lld: "
            "reference %.9g, data %.9g)\n", fn, differ, len, epsilon, first,
            (double)reference[first], (double)data[first]);
    return CUTFalse;
}

}  // namespace

extern "C" {

void cutFree(void *ptr) { free(ptr); }

void cpuify_cutil_fail(const char *file, int line, const char *what, const char *detail) {
    fflush(stdout);
    fprintf(stderr, "%s(%d) : %s: %s\n", file, line, what, detail);
    exit(EXIT_FAILURE);
}

int cpuify_cutil_stdin_is_terminal(void) { return isatty(0); }

char *cutFindFilePath(const char *filename, const char *executable_path) {
    if (!filename)
        return nullptr;
    std::vector<std::string> dirs = {"", "./data/", "../data/", "./", "../"};
    if (executable_path) {
        std::string exe = executable_path;
        size_t slash = exe.rfind('/');
        std::string dir = slash == std::string::npos ? "./" : exe.substr(0, slash + 1);
        std::string base = slash == std::string::npos ? exe : exe.substr(slash + 1);
        dirs.push_back(dir);
        dirs.push_back(dir + "data/");
        dirs.push_back(dir + "../../../src/" + base + "/data/");   // the SDK's layout
    }
    for (const std::string &d : dirs) {
        std::string path = (filename[0] == '/' && !d.empty()) ? std::string() : d + filename;
        struct stat st;
        if (!path.empty() && stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode))
            return strdup(path.c_str());
    }
    return nullptr;
}

CUTBoolean cutReadFilef(const char *f, float **d, unsigned *n, bool v) { return read_file("cutReadFilef", f, d, n, v); }
CUTBoolean cutReadFiled(const char *f, double **d, unsigned *n, bool v) { return read_file("cutReadFiled", f, d, n, v); }
CUTBoolean cutReadFilei(const char *f, int **d, unsigned *n, bool v) { return read_file("cutReadFilei", f, d, n, v); }
CUTBoolean cutReadFileui(const char *f, unsigned **d, unsigned *n, bool v) { return read_file("cutReadFileui", f, d, n, v); }
CUTBoolean cutReadFileb(const char *f, char **d, unsigned *n, bool v) { return read_file("cutReadFileb", f, d, n, v); }
CUTBoolean cutReadFileub(const char *f, unsigned char **d, unsigned *n, bool v) { return read_file("cutReadFileub", f, d, n, v); }

CUTBoolean cutWriteFilef(const char *f, const float *d, unsigned n, const float eps, bool v) {
    char fmt[16];
    snprintf(fmt, sizeof fmt, "%%.%dg\n", digits_for(eps, 9));
    return write_file("cutWriteFilef", f, d, n, eps, v, fmt);
}
CUTBoolean cutWriteFiled(const char *f, const double *d, unsigned n, const double eps, bool v) {
    char fmt[16];
    snprintf(fmt, sizeof fmt, "%%.%dg\n", digits_for(eps, 17));
    return write_file("cutWriteFiled", f, d, n, eps, v, fmt);
}
CUTBoolean cutWriteFilei(const char *f, const int *d, unsigned n, bool v) { return write_file("cutWriteFilei", f, d, n, 0, v, "%d\n"); }
CUTBoolean cutWriteFileui(const char *f, const unsigned *d, unsigned n, bool v) { return write_file("cutWriteFileui", f, d, n, 0, v, "%u\n"); }
CUTBoolean cutWriteFileb(const char *f, const char *d, unsigned n, bool v) {
    std::vector<int> wide(d, d + (d ? n : 0));
    return write_file("cutWriteFileb", f, wide.data(), n, 0, v, "%d\n");
}
CUTBoolean cutWriteFileub(const char *f, const unsigned char *d, unsigned n, bool v) {
    std::vector<unsigned> wide(d, d + (d ? n : 0));
    return write_file("cutWriteFileub", f, wide.data(), n, 0, v, "%u\n");
}

CUTBoolean cutLoadPGMub(const char *f, unsigned char **d, unsigned *w, unsigned *h) { return load_image("cutLoadPGMub", f, d, w, h, 1, 1); }
CUTBoolean cutLoadPPMub(const char *f, unsigned char **d, unsigned *w, unsigned *h) { return load_image("cutLoadPPMub", f, d, w, h, 3, 3); }
CUTBoolean cutLoadPPM4ub(const char *f, unsigned char **d, unsigned *w, unsigned *h) { return load_image("cutLoadPPM4ub", f, d, w, h, 3, 4); }
CUTBoolean cutLoadPGMi(const char *f, unsigned **d, unsigned *w, unsigned *h) { return load_image("cutLoadPGMi", f, d, w, h, 1, 1); }
CUTBoolean cutLoadPGMs(const char *f, unsigned short **d, unsigned *w, unsigned *h) { return load_image("cutLoadPGMs", f, d, w, h, 1, 1); }
CUTBoolean cutLoadPGMf(const char *f, float **d, unsigned *w, unsigned *h) { return load_image("cutLoadPGMf", f, d, w, h, 1, 1); }
CUTBoolean cutSavePGMub(const char *f, unsigned char *d, unsigned w, unsigned h) { return save_image("cutSavePGMub", f, d, w, h, 1, 1); }
CUTBoolean cutSavePPMub(const char *f, unsigned char *d, unsigned w, unsigned h) { return save_image("cutSavePPMub", f, d, w, h, 3, 3); }
CUTBoolean cutSavePPM4ub(const char *f, unsigned char *d, unsigned w, unsigned h) { return save_image("cutSavePPM4ub", f, d, w, h, 3, 4); }
CUTBoolean cutSavePGMi(const char *f, unsigned *d, unsigned w, unsigned h) { return save_image("cutSavePGMi", f, d, w, h, 1, 1); }
CUTBoolean cutSavePGMs(const char *f, unsigned short *d, unsigned w, unsigned h) { return save_image("cutSavePGMs", f, d, w, h, 1, 1); }
CUTBoolean cutSavePGMf(const char *f, float *d, unsigned w, unsigned h) { return save_image("cutSavePGMf", f, d, w, h, 1, 1); }

CUTBoolean cutCheckCmdLineFlag(const int argc, const char **argv, const char *flag_name) {
    return argument(argc, argv, flag_name) ? CUTTrue : CUTFalse;
}

CUTBoolean cutGetCmdLineArgumenti(const int argc, const char **argv, const char *name, int *val) {
    const char *v = argument(argc, argv, name);
    if (!v)
        return CUTFalse;
    if (!parse(v, val))
        bad_argument(name, v, "a whole number");
    return CUTTrue;
}

CUTBoolean cutGetCmdLineArgumentf(const int argc, const char **argv, const char *name, float *val) {
    const char *v = argument(argc, argv, name);
    if (!v)
        return CUTFalse;
    if (!parse(v, val))
        bad_argument(name, v, "a number");
    return CUTTrue;
}

CUTBoolean cutGetCmdLineArgumentstr(const int argc, const char **argv, const char *name, char **val) {
    const char *v = argument(argc, argv, name);
    if (!v)
        return CUTFalse;
    *val = (char *)v;      // points into argv, as the SDK's did
    return CUTTrue;
}

CUTBoolean cutGetCmdLineArgumentListstr(const int argc, const char **argv, const char *name,
                                        char ***val, unsigned *len) {
    const char *v = argument(argc, argv, name);
    if (!v)
        return CUTFalse;
    std::vector<std::string> items;
    std::string all = v;
    size_t start = 0;
    for (;;) {
        size_t comma = all.find(',', start);
        items.push_back(all.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
        if (comma == std::string::npos)
            break;
        start = comma + 1;
    }
    char **list = (char **)malloc(items.size() * sizeof(char *));
    if (!list)
        return CUTFalse;
    for (size_t i = 0; i < items.size(); i++)
        list[i] = strdup(items[i].c_str());
    *val = list;
    *len = (unsigned)items.size();
    return CUTTrue;
}

CUTBoolean cutCheckCondition(int val, const char *file, const int line) {
    if (val)
        return CUTTrue;
    fprintf(stderr, "%s(%d) : condition failed\n", file, line);
    return CUTFalse;
}

CUTBoolean cutComparef(const float *r, const float *d, const unsigned n) { return compare("cutComparef", r, d, n, 0, 0); }
CUTBoolean cutComparei(const int *r, const int *d, const unsigned n) { return compare("cutComparei", r, d, n, 0, 0); }
CUTBoolean cutCompareuit(const unsigned *r, const unsigned *d, const unsigned n, const float e, const float t) { return compare("cutCompareuit", r, d, n, e, t); }
CUTBoolean cutCompareub(const unsigned char *r, const unsigned char *d, const unsigned n) { return compare("cutCompareub", r, d, n, 0, 0); }
CUTBoolean cutCompareube(const unsigned char *r, const unsigned char *d, const unsigned n, const int e) { return compare("cutCompareube", r, d, n, e, 0); }
CUTBoolean cutCompareubt(const unsigned char *r, const unsigned char *d, const unsigned n, const float e, const float t) { return compare("cutCompareubt", r, d, n, e, t); }
CUTBoolean cutComparefe(const float *r, const float *d, const unsigned n, const float e) { return compare("cutComparefe", r, d, n, e, 0); }
CUTBoolean cutComparefet(const float *r, const float *d, const unsigned n, const float e, const float t) { return compare("cutComparefet", r, d, n, e, t); }

CUTBoolean cutCompareL2fe(const float *reference, const float *data, const unsigned len,
                          const float epsilon) {
    if (!reference || !data) {
        report("cutCompareL2fe: a NULL array");
        return CUTFalse;
    }
    double err = 0, ref = 0;
    for (unsigned i = 0; i < len; i++) {
        double diff = (double)reference[i] - (double)data[i];
        err += diff * diff;
        ref += (double)reference[i] * reference[i];
    }
    if (ref < 1e-7) {
        fprintf(stderr, "cutCompareL2fe: the reference's L2 norm is 0: no relative error\n");
        return CUTFalse;
    }
    double relative = sqrt(err) / sqrt(ref);
    if (relative < epsilon)      // false for a NaN
        return CUTTrue;
    fprintf(stderr, "cutCompareL2fe: relative L2 error %g is not below %g\n", relative, epsilon);
    return CUTFalse;
}

CUTBoolean cutComparePPM(const char *src_file, const char *ref_file, const float epsilon,
                         const float threshold, bool verbose) {
    std::vector<unsigned char> src, ref;
    unsigned sw, sh, rw, rh;
    if (!src_file || !ref_file) {
        report("cutComparePPM: a NULL file name");
        return CUTFalse;
    }
    // PPM first, then PGM (quietly, by the magic number)
    FILE *f = fopen(ref_file, "rb");
    char magic[3] = {0, 0, 0};
    unsigned channels = 3;
    if (f) {
        if (fread(magic, 1, 2, f) == 2 && strcmp(magic, "P5") == 0)
            channels = 1;
        fclose(f);
    }
    if (!load_pnm("cutComparePPM", src_file, channels, src, &sw, &sh) ||
        !load_pnm("cutComparePPM", ref_file, channels, ref, &rw, &rh))
        return CUTFalse;
    if (sw != rw || sh != rh) {
        fprintf(stderr, "cutComparePPM: '%s' is %ux%u, '%s' is %ux%u\n", src_file, sw, sh,
                ref_file, rw, rh);
        return CUTFalse;
    }
    CUTBoolean same = compare("cutComparePPM", ref.data(), src.data(), (unsigned)ref.size(),
                              epsilon, threshold);
    if (verbose)
        fprintf(stderr, "cutComparePPM: '%s' and '%s' %s\n", src_file, ref_file,
                same ? "match" : "differ");
    return same;
}

CUTBoolean cutCreateTimer(unsigned int *name) {
    if (!name) {
        report("cutCreateTimer: a NULL argument");
        return CUTFalse;
    }
    std::lock_guard<std::mutex> g(timers_lock);
    timers.emplace_back();
    timers.back().live = true;
    *name = (unsigned)timers.size();
    return CUTTrue;
}

CUTBoolean cutDeleteTimer(unsigned int name) {
    std::lock_guard<std::mutex> g(timers_lock);
    Timer *t = timer_of(name, "cutDeleteTimer");
    if (!t)
        return CUTFalse;
    *t = Timer();
    return CUTTrue;
}

CUTBoolean cutStartTimer(const unsigned int name) {
    std::lock_guard<std::mutex> g(timers_lock);
    Timer *t = timer_of(name, "cutStartTimer");
    if (!t)
        return CUTFalse;
    t->started = now_ms();      // a start while running begins the interval again
    t->running = true;
    return CUTTrue;
}

CUTBoolean cutStopTimer(const unsigned int name) {
    std::lock_guard<std::mutex> g(timers_lock);
    Timer *t = timer_of(name, "cutStopTimer");
    if (!t)
        return CUTFalse;
    if (t->running) {
        t->total += now_ms() - t->started;
        t->intervals++;
        t->running = false;
    }
    return CUTTrue;
}

CUTBoolean cutResetTimer(const unsigned int name) {
    std::lock_guard<std::mutex> g(timers_lock);
    Timer *t = timer_of(name, "cutResetTimer");
    if (!t)
        return CUTFalse;
    t->total = 0;
    t->intervals = 0;
    if (t->running)
        t->started = now_ms();
    return CUTTrue;
}

float cutGetTimerValue(const unsigned int name) {
    std::lock_guard<std::mutex> g(timers_lock);
    Timer *t = timer_of(name, "cutGetTimerValue");
    if (!t)
        return 0.0f;
    return (float)(t->total + (t->running ? now_ms() - t->started : 0.0));
}

float cutGetAverageTimerValue(const unsigned int name) {
    std::lock_guard<std::mutex> g(timers_lock);
    Timer *t = timer_of(name, "cutGetAverageTimerValue");
    if (!t)
        return 0.0f;
    return t->intervals ? (float)(t->total / t->intervals) : 0.0f;
}

}  // extern "C"
