/* abi.c: identifies the kernel library to the registration layer, which refuses one of another ABI version. */
#include "../myops.h"

int myops_abi_version(void) { return MYOPS_ABI_VERSION; }
