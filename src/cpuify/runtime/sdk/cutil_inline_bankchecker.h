/* cutil_inline_bankchecker.h (cpuify): the SDK's shared-memory bank checker of its emulation
 * mode; on the CPU there are no banks, so an access is just the element. */
#ifndef CPUIFY_SDK_CUTIL_INLINE_BANKCHECKER_H
#define CPUIFY_SDK_CUTIL_INLINE_BANKCHECKER_H
#include <cutil.h>
#ifndef cutilBankChecker
#define cutilBankChecker(array, idx) (array[idx])
#endif
#endif
