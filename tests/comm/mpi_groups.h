/* zc_mpi_helper's cases of mpi_groups.c (communicators from what the
 * program has): each returns the process's exit status. */
#ifndef ZC_TESTS_COMM_MPI_GROUPS_H
#define ZC_TESTS_COMM_MPI_GROUPS_H

int zc_mpi_split_case(void);
int zc_mpi_caller_case(void);

#endif
