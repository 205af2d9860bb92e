/* cutil.h: cpuify's implementation of the utility library of NVIDIA's GPU Computing SDK
 * (2008-2012), for programs written against it (`#include <cutil.h>`, linked with -lcutil).
 * Written for cpuify from the SDK's documented API; not NVIDIA's file.
 *
 * What is here: CUTBoolean, the error-checking macros (CUT_SAFE_CALL, CUDA_SAFE_CALL,
 * CUDA_SAFE_CALL_NO_SYNC, CUT_CHECK_ERROR, CU_SAFE_CALL, CUFFT_SAFE_CALL, CUT_SAFE_MALLOC, CUT_CONDITION,
 * CUT_DEVICE_INIT, CUT_EXIT, CUT_BANK_CHECKER), timers (cutCreateTimer ... cutGetTimerValue),
 * the command line (cutCheckCmdLineFlag, cutGetCmdLineArgumenti/f/str), files of numbers
 * (cutReadFile..., cutWriteFile...), PGM/PPM images (cutLoadPGM..., cutSavePGM..., cutLoadPPM...ub,
 * cutSavePPM...ub), comparisons (cutCompare...), cutFindFilePath, cutFree.  The functions are in
 * libcutil_x86_64.a (cutil.cpp) of `cpuify cuda-sdk`.
 *
 * A failed check prints where (file and line), what failed and how, and exits with
 * EXIT_FAILURE, as the SDK did. */
#ifndef CPUIFY_SDK_CUTIL_H
#define CPUIFY_SDK_CUTIL_H

#include <stdio.h>
#include <stdlib.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif

#ifdef __cplusplus
#define CPUIFY_CUTIL_DEFAULT(value) = value
extern "C" {
#else
#define CPUIFY_CUTIL_DEFAULT(value)
#endif

/* Windows DLL markers of the SDK's headers: nothing on Linux */
#ifndef DLL_MAPPING
#define DLL_MAPPING
#endif
#ifndef CUTIL_API
#define CUTIL_API
#endif

enum CUTBoolean { CUTFalse = 0, CUTTrue = 1 };
#ifndef __cplusplus
typedef enum CUTBoolean CUTBoolean;
#endif

/* ---- memory, files ---------------------------------------------------------------------- */

/* Frees what cutReadFile*, cutLoadPGM* / cutLoadPPM* and cutFindFilePath allocated. */
void cutFree(void *ptr);

/* A file the program looks for: `filename` as given, then in ./data/, ../data/, the
 * executable's directory and its data/ (`executable_path` is argv[0], may be NULL).
 * Returns a malloc'd path (free with cutFree) or NULL when there is none. */
char *cutFindFilePath(const char *filename, const char *executable_path);

/* Whitespace-separated numbers in a text file (lines starting with '#' are comments, as
 * cutWriteFile* writes them).  With *data == NULL an array is allocated (free with cutFree)
 * and *len set to the count; with *data given, *len is its length and the file must hold
 * exactly that many values.  CUTFalse (and a message on stderr) when the file cannot be read,
 * holds something that is not a number or holds a different count. */
CUTBoolean cutReadFilef(const char *filename, float **data, unsigned int *len,
                        bool verbose CPUIFY_CUTIL_DEFAULT(false));
CUTBoolean cutReadFiled(const char *filename, double **data, unsigned int *len,
                        bool verbose CPUIFY_CUTIL_DEFAULT(false));
CUTBoolean cutReadFilei(const char *filename, int **data, unsigned int *len,
                        bool verbose CPUIFY_CUTIL_DEFAULT(false));
CUTBoolean cutReadFileui(const char *filename, unsigned int **data, unsigned int *len,
                         bool verbose CPUIFY_CUTIL_DEFAULT(false));
CUTBoolean cutReadFileb(const char *filename, char **data, unsigned int *len,
                        bool verbose CPUIFY_CUTIL_DEFAULT(false));
CUTBoolean cutReadFileub(const char *filename, unsigned char **data, unsigned int *len,
                         bool verbose CPUIFY_CUTIL_DEFAULT(false));

/* `len` values, one per line, after a `# epsilon` comment line; floating-point values with
 * enough digits that reading them back is within `epsilon` (all digits when epsilon is 0). */
CUTBoolean cutWriteFilef(const char *filename, const float *data, unsigned int len,
                         const float epsilon, bool verbose CPUIFY_CUTIL_DEFAULT(false));
CUTBoolean cutWriteFiled(const char *filename, const double *data, unsigned int len,
                         const double epsilon, bool verbose CPUIFY_CUTIL_DEFAULT(false));
CUTBoolean cutWriteFilei(const char *filename, const int *data, unsigned int len,
                         bool verbose CPUIFY_CUTIL_DEFAULT(false));
CUTBoolean cutWriteFileui(const char *filename, const unsigned int *data, unsigned int len,
                          bool verbose CPUIFY_CUTIL_DEFAULT(false));
CUTBoolean cutWriteFileb(const char *filename, const char *data, unsigned int len,
                         bool verbose CPUIFY_CUTIL_DEFAULT(false));
CUTBoolean cutWriteFileub(const char *filename, const unsigned char *data, unsigned int len,
                          bool verbose CPUIFY_CUTIL_DEFAULT(false));

/* PGM (P5, 8-bit grey) and PPM (P6, 8-bit RGB) images.  With *data == NULL the pixels are
 * allocated (free with cutFree); otherwise *w and *h must be the file's size.  PPM4 means
 * four bytes per pixel (RGBA, alpha 0 on load, dropped on save); PGMi/PGMs/PGMf convert
 * each grey byte to an unsigned int / unsigned short / float (0..255). */
CUTBoolean cutLoadPGMub(const char *file, unsigned char **data, unsigned int *w, unsigned int *h);
CUTBoolean cutLoadPPMub(const char *file, unsigned char **data, unsigned int *w, unsigned int *h);
CUTBoolean cutLoadPPM4ub(const char *file, unsigned char **data, unsigned int *w, unsigned int *h);
CUTBoolean cutLoadPGMi(const char *file, unsigned int **data, unsigned int *w, unsigned int *h);
CUTBoolean cutLoadPGMs(const char *file, unsigned short **data, unsigned int *w, unsigned int *h);
CUTBoolean cutLoadPGMf(const char *file, float **data, unsigned int *w, unsigned int *h);
CUTBoolean cutSavePGMub(const char *file, unsigned char *data, unsigned int w, unsigned int h);
CUTBoolean cutSavePPMub(const char *file, unsigned char *data, unsigned int w, unsigned int h);
CUTBoolean cutSavePPM4ub(const char *file, unsigned char *data, unsigned int w, unsigned int h);
CUTBoolean cutSavePGMi(const char *file, unsigned int *data, unsigned int w, unsigned int h);
CUTBoolean cutSavePGMs(const char *file, unsigned short *data, unsigned int w, unsigned int h);
CUTBoolean cutSavePGMf(const char *file, float *data, unsigned int w, unsigned int h);

/* ---- the command line ------------------------------------------------------------------- */

/* Flags and arguments are written `--name` / `-name` and `--name=value`. */
CUTBoolean cutCheckCmdLineFlag(const int argc, const char **argv, const char *flag_name);
/* CUTTrue and *val set when `--name=value` is given and value is a whole number (an int /
 * a number / any text); CUTFalse when the argument is not there.  A value that is not a
 * number is an error that ends the program (it names the argument). */
CUTBoolean cutGetCmdLineArgumenti(const int argc, const char **argv, const char *arg_name, int *val);
CUTBoolean cutGetCmdLineArgumentf(const int argc, const char **argv, const char *arg_name, float *val);
CUTBoolean cutGetCmdLineArgumentstr(const int argc, const char **argv, const char *arg_name, char **val);
/* `--name=a,b,c`: *val is a malloc'd array of malloc'd strings (free each and the array with
 * cutFree), *len their count. */
CUTBoolean cutGetCmdLineArgumentListstr(const int argc, const char **argv, const char *arg_name,
                                        char ***val, unsigned int *len);

/* ---- checks ----------------------------------------------------------------------------- */

/* CUTFalse (and a line on stderr naming file and line) when `val` is false. */
CUTBoolean cutCheckCondition(int val, const char *file, const int line);

/* CUTTrue when every element of `data` equals `reference` (...e: within `epsilon`; ...t:
 * allowing a fraction `threshold` of the elements to differ).  cutCompareL2fe: the relative
 * L2 error ||data - reference|| / ||reference|| is below `epsilon`.  A mismatch prints the
 * first differing index and both values on stderr. */
CUTBoolean cutComparef(const float *reference, const float *data, const unsigned int len);
CUTBoolean cutComparei(const int *reference, const int *data, const unsigned int len);
CUTBoolean cutCompareuit(const unsigned int *reference, const unsigned int *data,
                         const unsigned int len, const float epsilon, const float threshold);
CUTBoolean cutCompareub(const unsigned char *reference, const unsigned char *data,
                        const unsigned int len);
CUTBoolean cutCompareube(const unsigned char *reference, const unsigned char *data,
                         const unsigned int len, const int epsilon);
CUTBoolean cutCompareubt(const unsigned char *reference, const unsigned char *data,
                         const unsigned int len, const float epsilon, const float threshold);
CUTBoolean cutComparefe(const float *reference, const float *data, const unsigned int len,
                        const float epsilon);
CUTBoolean cutComparefet(const float *reference, const float *data, const unsigned int len,
                         const float epsilon, const float threshold);
CUTBoolean cutCompareL2fe(const float *reference, const float *data, const unsigned int len,
                          const float epsilon);
/* The PPM/PGM image `src_file` against `ref_file`: CUTTrue when at most a fraction
 * `threshold` of the bytes differ by more than `epsilon`. */
CUTBoolean cutComparePPM(const char *src_file, const char *ref_file, const float epsilon,
                         const float threshold, bool verbose CPUIFY_CUTIL_DEFAULT(false));

/* ---- timers (wall-clock, milliseconds) -------------------------------------------------- */

/* A timer adds up the time between each start and the stop that follows; reset sets it to
 * zero.  cutGetTimerValue: the total, including a running interval; cutGetAverageTimerValue:
 * the total of the finished intervals divided by their number (0 before the first).  Every
 * function returns CUTFalse for a name cutCreateTimer did not give (or one deleted). */
CUTBoolean cutCreateTimer(unsigned int *name);
CUTBoolean cutDeleteTimer(unsigned int name);
CUTBoolean cutStartTimer(const unsigned int name);
CUTBoolean cutStopTimer(const unsigned int name);
CUTBoolean cutResetTimer(const unsigned int name);
float cutGetTimerValue(const unsigned int name);
float cutGetAverageTimerValue(const unsigned int name);

/* used by the macros below: prints "<file>(<line>) : <what>" and exits with EXIT_FAILURE */
void cpuify_cutil_fail(const char *file, int line, const char *what, const char *detail);

#ifdef __cplusplus
}
#endif

/* ---- the macros ------------------------------------------------------------------------- */

/* Each is one `{ ... }` block, as in the SDK (code writes them with and without a `;`).  They
 * check in every build: some SDK versions compiled them away without _DEBUG, which would
 * hide errors. */

/* a cut* call that returned CUTFalse */
#define CUT_SAFE_CALL(call) {                                                                 \
    if (CUTTrue != (call))                                                                    \
        cpuify_cutil_fail(__FILE__, __LINE__, "cutil call failed", #call); }

/* an allocation that returned NULL */
#define CUT_SAFE_MALLOC(mallocCall) {                                                         \
    if (!(mallocCall))                                                                        \
        cpuify_cutil_fail(__FILE__, __LINE__, "allocation failed", #mallocCall); }

#define CUT_CONDITION(val) {                                                                  \
    if (CUTFalse == cutCheckCondition((val), __FILE__, __LINE__)) exit(EXIT_FAILURE); }

/* a CUDA runtime call that returned an error (the CUDA macros need cuda_runtime.h, which
 * nvcc includes in every .cu file) */
#define CUDA_SAFE_CALL_NO_SYNC(call) {                                                        \
    cudaError_t cpuify_cutil_err = (call);                                                    \
    if (cudaSuccess != cpuify_cutil_err)                                                      \
        cpuify_cutil_fail(__FILE__, __LINE__, cudaGetErrorString(cpuify_cutil_err), #call); }

#define CUDA_SAFE_CALL(call) CUDA_SAFE_CALL_NO_SYNC(call)

/* the error of the last launch (kernel launches return nothing); with _DEBUG (dbg=1 in the
 * SDK's make rules) after waiting for it, so errors while it runs are caught too */
#ifdef _DEBUG
#define CUT_CHECK_ERROR(errorMessage) {                                                       \
    cudaError_t cpuify_cutil_err = cudaGetLastError();                                        \
    if (cudaSuccess == cpuify_cutil_err) cpuify_cutil_err = cudaDeviceSynchronize();          \
    if (cudaSuccess != cpuify_cutil_err)                                                      \
        cpuify_cutil_fail(__FILE__, __LINE__, errorMessage,                                   \
                          cudaGetErrorString(cpuify_cutil_err)); }
#else
#define CUT_CHECK_ERROR(errorMessage) {                                                       \
    cudaError_t cpuify_cutil_err = cudaGetLastError();                                        \
    if (cudaSuccess != cpuify_cutil_err)                                                      \
        cpuify_cutil_fail(__FILE__, __LINE__, errorMessage,                                   \
                          cudaGetErrorString(cpuify_cutil_err)); }
#endif

/* driver API (cuda.h) and cuFFT (cufft.h) calls */
#define CU_SAFE_CALL_NO_SYNC(call) {                                                          \
    int cpuify_cutil_err = (int)(call);                                                       \
    if (0 != cpuify_cutil_err) {                                                              \
        char cpuify_cutil_msg[64];                                                            \
        snprintf(cpuify_cutil_msg, sizeof cpuify_cutil_msg, "CUDA driver API error %d",       \
                 cpuify_cutil_err);                                                           \
        cpuify_cutil_fail(__FILE__, __LINE__, cpuify_cutil_msg, #call); } }
#define CU_SAFE_CALL(call) CU_SAFE_CALL_NO_SYNC(call)
#define CUFFT_SAFE_CALL(call) {                                                               \
    int cpuify_cutil_err = (int)(call);                                                       \
    if (0 != cpuify_cutil_err) {                                                              \
        char cpuify_cutil_msg[64];                                                            \
        snprintf(cpuify_cutil_msg, sizeof cpuify_cutil_msg, "CUFFT error %d",                 \
                 cpuify_cutil_err);                                                           \
        cpuify_cutil_fail(__FILE__, __LINE__, cpuify_cutil_msg, #call); } }

/* device selection: `--device=N` on the command line, else device 0; prints the device's
 * name.  CUT_DEVICE_INIT(argc, argv) and the older CUT_DEVICE_INIT() */
#define CPUIFY_CUTIL_DEVICE_INIT(ARGC, ARGV) {                                                \
    int cpuify_cutil_count = 0, cpuify_cutil_dev = 0;                                         \
    CUDA_SAFE_CALL_NO_SYNC(cudaGetDeviceCount(&cpuify_cutil_count));                          \
    if (cpuify_cutil_count == 0)                                                              \
        cpuify_cutil_fail(__FILE__, __LINE__, "no CUDA device", "cudaGetDeviceCount");        \
    cutGetCmdLineArgumenti((ARGC), (const char **)(ARGV), "device", &cpuify_cutil_dev);       \
    if (cpuify_cutil_dev < 0 || cpuify_cutil_dev >= cpuify_cutil_count)                       \
        cpuify_cutil_fail(__FILE__, __LINE__, "--device= names no device", "CUT_DEVICE_INIT");\
    cudaDeviceProp cpuify_cutil_prop;                                                         \
    CUDA_SAFE_CALL_NO_SYNC(cudaGetDeviceProperties(&cpuify_cutil_prop, cpuify_cutil_dev));    \
    fprintf(stderr, "Using device %d: %s\n", cpuify_cutil_dev, cpuify_cutil_prop.name);       \
    CUDA_SAFE_CALL(cudaSetDevice(cpuify_cutil_dev)); }
#define CPUIFY_CUTIL_DEVICE_INIT0() CPUIFY_CUTIL_DEVICE_INIT(0, 0)
#define CPUIFY_CUTIL_DEVICE_INIT2(ARGC, ARGV) CPUIFY_CUTIL_DEVICE_INIT(ARGC, ARGV)
#define CPUIFY_CUTIL_PICK(_skip, _a, _b, NAME, ...) NAME
#define CUT_DEVICE_INIT(...) CPUIFY_CUTIL_PICK(_skip, ##__VA_ARGS__, CPUIFY_CUTIL_DEVICE_INIT2, \
    CPUIFY_CUTIL_DEVICE_INIT1_NEEDS_ARGC_AND_ARGV, CPUIFY_CUTIL_DEVICE_INIT0)(__VA_ARGS__)

/* the end of an SDK sample: waits for ENTER (unless --noprompt is given or the standard
 * input is not a terminal: batch runs never hang), then exits with EXIT_SUCCESS */
#define CUT_EXIT(argc, argv) {                                                                \
    if (!cutCheckCmdLineFlag((argc), (const char **)(argv), "noprompt") &&                    \
        cpuify_cutil_stdin_is_terminal()) {                                                   \
        printf("\nPress ENTER to exit...\n");                                                 \
        fflush(stdout); fflush(stderr);                                                       \
        getchar();                                                                            \
    }                                                                                         \
    exit(EXIT_SUCCESS); }

/* shared-memory bank-conflict checker of the SDK's emulation mode: the element itself */
#define CUT_BANK_CHECKER(array, index) (array[index])

#ifdef __cplusplus
extern "C"
#endif
int cpuify_cutil_stdin_is_terminal(void);

#endif /* CPUIFY_SDK_CUTIL_H */
