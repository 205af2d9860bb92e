/* shrQATest.h (cpuify): the SDK's test-result lines (shrQAStart, shrQAFinish, shrQAFinishExit,
 * eQAstatus), which cpuify's shrUtils.h defines. */
#ifndef CPUIFY_SDK_SHRQATEST_H
#define CPUIFY_SDK_SHRQATEST_H
#include <shrUtils.h>
#endif
