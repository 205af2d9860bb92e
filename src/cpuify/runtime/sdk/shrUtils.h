/* shrUtils.h: cpuify's implementation of the "shared" utilities of NVIDIA's GPU Computing SDK
 * 3.x (`#include <shrUtils.h>`, linked with -lshrutil_x86_64 -lcutil_x86_64), written for
 * cpuify from the SDK's documented API; not NVIDIA's file.  The file, image, command-line
 * and comparison functions are cutil's (cutil.h) under the shr names; shrLog/shrLogEx print
 * to the console and, once shrSetLogFileName named one, to a log file; shrDeltaT measures
 * wall-clock time per counter; shrQA* print the SDK's test-result lines. */
#ifndef CPUIFY_SDK_SHRUTILS_H
#define CPUIFY_SDK_SHRUTILS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cutil.h>

typedef int shrBOOL;
#define shrTRUE 1
#define shrFALSE 0

/* shrLogEx modes (or-ed) */
#define LOGFILE    0x01
#define LOGCONSOLE 0x02
#define CLOSELOG   0x04
#define ERRORMSG   0x08
#define APPENDMODE 0x10
#define MASTER     0x20
#define LOGBOTH    (LOGFILE | LOGCONSOLE)
#define HDASHLINE  "-----------------------------------------------------------\n"

#define SHR_DEFAULT_ARG(v) CPUIFY_CUTIL_DEFAULT(v)

#ifdef __cplusplus
extern "C" {
#endif

void shrFree(void *ptr);
/* the log file shrLog and shrLogEx(LOGFILE) write to (created anew) */
void shrSetLogFileName(const char *cOverRideName);
void shrLog(const char *cFormatString, ...);
/* iErrNum != 0 (with ERRORMSG) adds " Error # <n>" and the file is flushed; CLOSELOG closes it */
void shrLogEx(int iLogMode, int iErrNum, const char *cFormatString, ...);
/* seconds since the previous call with the same counter (0..7), 0 for the first */
double shrDeltaT(int iCounterID);
/* the smallest multiple of group_size that is at least global_size */
size_t shrRoundUp(int group_size, int global_size);

char *shrFindFilePath(const char *filename, const char *executablePath);
shrBOOL shrReadFilef(const char *filename, float **data, unsigned int *len, bool verbose SHR_DEFAULT_ARG(false));
shrBOOL shrReadFiled(const char *filename, double **data, unsigned int *len, bool verbose SHR_DEFAULT_ARG(false));
shrBOOL shrReadFilei(const char *filename, int **data, unsigned int *len, bool verbose SHR_DEFAULT_ARG(false));
shrBOOL shrReadFileui(const char *filename, unsigned int **data, unsigned int *len, bool verbose SHR_DEFAULT_ARG(false));
shrBOOL shrReadFileb(const char *filename, char **data, unsigned int *len, bool verbose SHR_DEFAULT_ARG(false));
shrBOOL shrReadFileub(const char *filename, unsigned char **data, unsigned int *len, bool verbose SHR_DEFAULT_ARG(false));
shrBOOL shrWriteFilef(const char *filename, const float *data, unsigned int len, const float epsilon, bool verbose SHR_DEFAULT_ARG(false));
shrBOOL shrWriteFiled(const char *filename, const double *data, unsigned int len, const double epsilon, bool verbose SHR_DEFAULT_ARG(false));
shrBOOL shrWriteFilei(const char *filename, const int *data, unsigned int len, bool verbose SHR_DEFAULT_ARG(false));
shrBOOL shrWriteFileui(const char *filename, const unsigned int *data, unsigned int len, bool verbose SHR_DEFAULT_ARG(false));
shrBOOL shrWriteFileb(const char *filename, const char *data, unsigned int len, bool verbose SHR_DEFAULT_ARG(false));
shrBOOL shrWriteFileub(const char *filename, const unsigned char *data, unsigned int len, bool verbose SHR_DEFAULT_ARG(false));
shrBOOL shrLoadPPM4ub(const char *file, unsigned char **data, unsigned int *w, unsigned int *h);
shrBOOL shrSavePPM4ub(const char *file, unsigned char *data, unsigned int w, unsigned int h);
shrBOOL shrLoadPGMub(const char *file, unsigned char **data, unsigned int *w, unsigned int *h);
shrBOOL shrSavePGMub(const char *file, unsigned char *data, unsigned int w, unsigned int h);
shrBOOL shrCheckCmdLineFlag(const int argc, const char **argv, const char *flag_name);
shrBOOL shrGetCmdLineArgumenti(const int argc, const char **argv, const char *arg_name, int *val);
shrBOOL shrGetCmdLineArgumentu(const int argc, const char **argv, const char *arg_name, unsigned int *val);
shrBOOL shrGetCmdLineArgumentf(const int argc, const char **argv, const char *arg_name, float *val);
shrBOOL shrGetCmdLineArgumentstr(const int argc, const char **argv, const char *arg_name, char **val);
shrBOOL shrGetCmdLineArgumentListstr(const int argc, const char **argv, const char *arg_name, char ***val, unsigned int *len);
shrBOOL shrComparef(const float *reference, const float *data, const unsigned int len);
shrBOOL shrComparei(const int *reference, const int *data, const unsigned int len);
shrBOOL shrCompareuit(const unsigned int *reference, const unsigned int *data, const unsigned int len, const float epsilon, const float threshold);
shrBOOL shrCompareub(const unsigned char *reference, const unsigned char *data, const unsigned int len);
shrBOOL shrCompareubt(const unsigned char *reference, const unsigned char *data, const unsigned int len, const float epsilon, const float threshold);
shrBOOL shrCompareube(const unsigned char *reference, const unsigned char *data, const unsigned int len, const int epsilon);
shrBOOL shrComparefe(const float *reference, const float *data, const unsigned int len, const float epsilon);
shrBOOL shrComparefet(const float *reference, const float *data, const unsigned int len, const float epsilon, const float threshold);
shrBOOL shrCompareL2fe(const float *reference, const float *data, const unsigned int len, const float epsilon);
shrBOOL shrComparePPM(const char *src_file, const char *ref_file, const float epsilon, const float threshold);
shrBOOL shrComparePGM(const char *src_file, const char *ref_file, const float epsilon, const float threshold);

/* the check behind shrCheckError: prints where and exits with EXIT_FAILURE after calling
 * pCleanup (if any) when iSample != iReference */
void cpuify_shr_check(int iSample, int iReference, void (*pCleanup)(int), const char *cFile, const int iLine);
/* the name of the program (argv[0] without its directory) */
const char *cpuify_shr_name(const char *argv0);

#ifdef __cplusplus
}
#endif

#define shrCheckErrorEX(a, b, c) cpuify_shr_check((a), (b), (c), __FILE__, __LINE__)
#define shrCheckError(a, b) shrCheckErrorEX((a), (b), 0)

/* ---- the SDK's test-result lines (shrQATest.h) -------------------------------------------- */
enum eQAstatus { QA_FAILED = 0, QA_PASSED = 1, QA_WAIVED = 2 };

static inline void shrQAStart(int argc, char **argv) {
    (void)argc;
    printf("[%s] starting...\n", argc > 0 ? cpuify_shr_name(argv[0]) : "program");
    fflush(stdout);
}

static inline void shrQAFinish(int argc, const char **argv, int iStatus) {
    const char *status = iStatus == QA_PASSED ? "PASSED" : iStatus == QA_WAIVED ? "WAIVED" : "FAILED";
    printf("[%s] test results...\n%s\n", argc > 0 ? cpuify_shr_name(argv[0]) : "program", status);
    fflush(stdout);
}

/* exits: EXIT_SUCCESS when passed or waived, EXIT_FAILURE when failed */
static inline void shrQAFinishExit(int argc, const char **argv, int iStatus) {
    shrQAFinish(argc, argv, iStatus);
    exit(iStatus == QA_FAILED ? EXIT_FAILURE : EXIT_SUCCESS);
}

static inline void shrQAFinish2(bool bQATest, int argc, const char **argv, int iStatus) {
    (void)bQATest;
    shrQAFinish(argc, argv, iStatus);
}

static inline void shrQAFinishExit2(bool bQATest, int argc, const char **argv, int iStatus) {
    (void)bQATest;
    shrQAFinishExit(argc, argv, iStatus);
}

/* the end of an SDK 3.x sample: as CUT_EXIT (waits for ENTER only on a terminal without
 * --noprompt), then exits with EXIT_SUCCESS */
#define shrEXIT(argc, argv) CUT_EXIT(argc, argv)

#endif /* CPUIFY_SDK_SHRUTILS_H */
