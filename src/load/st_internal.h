/* The set's pieces (internal to src/load): one file's header. */
#ifndef ZC_LOAD_ST_INTERNAL_H
#define ZC_LOAD_ST_INTERNAL_H

#include "load/load.h"

/* Opens set->files[fi].path, reads and validates its header and appends its
 * tensors to set->tensors (sorted by offset, offsets made absolute); sets
 * the file's bytes and header_bytes. Errors name the file and the tensor. */
zc_status zc__st_read_header(zc_st_set *set, int fi);

#endif
