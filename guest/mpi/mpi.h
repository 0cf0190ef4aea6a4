/* SPDX-License-Identifier: GPL-2.0 */
/*
 * mpi.h: the MPI subset of ukl-mpi (guest/mpi/ukl-mpi.c), enough for
 * Secrecy's three parties to run in three VMs that talk over TCP.
 *
 * Only MPI_COMM_WORLD, point-to-point messages between named ranks with
 * named tags, and the calls below. Anything else MPI has (collectives,
 * MPI_ANY_SOURCE/MPI_ANY_TAG, MPI_Get_count, MPI_Test, ...) is left out
 * on purpose: a program that uses it does not compile. The library's
 * header comment describes the environment it reads (UKL_MPI_*).
 *
 * Compiles as C (C99 and later) and as C++ (C++11 and later).
 */
#ifndef UKL_MPI_H
#define UKL_MPI_H

#ifdef __cplusplus
extern "C" {
#endif

typedef int MPI_Comm;
typedef int MPI_Datatype;
typedef struct ukl_mpi_request *MPI_Request;

typedef struct {
	int MPI_SOURCE;
	int MPI_TAG;
	int MPI_ERROR;
	int ukl_reserved;
	long long ukl_bytes;	/* bytes received */
} MPI_Status;

#define MPI_SUCCESS			0

#define MPI_COMM_WORLD			((MPI_Comm)0x554b4c31)

/* Datatypes: an index into the library's table of sizes. */
#define MPI_CHAR			((MPI_Datatype)1)
#define MPI_C_BOOL			((MPI_Datatype)2)
#define MPI_INT				((MPI_Datatype)3)
#define MPI_UNSIGNED			((MPI_Datatype)4)
#define MPI_LONG			((MPI_Datatype)5)
#define MPI_UNSIGNED_LONG		((MPI_Datatype)6)
#define MPI_LONG_LONG			((MPI_Datatype)7)
#define MPI_UNSIGNED_LONG_LONG		((MPI_Datatype)8)
#define MPI_BYTE			((MPI_Datatype)9)
#define MPI_DOUBLE			((MPI_Datatype)10)

#define MPI_STATUS_IGNORE		((MPI_Status *)0)
#define MPI_STATUSES_IGNORE		((MPI_Status *)0)

int MPI_Init(int *argc, char ***argv);
int MPI_Finalize(void);
int MPI_Abort(MPI_Comm comm, int errorcode);
int MPI_Comm_rank(MPI_Comm comm, int *rank);
int MPI_Comm_size(MPI_Comm comm, int *size);

int MPI_Send(const void *buf, int count, MPI_Datatype datatype, int dest,
	     int tag, MPI_Comm comm);
int MPI_Recv(void *buf, int count, MPI_Datatype datatype, int source,
	     int tag, MPI_Comm comm, MPI_Status *status);
int MPI_Isend(const void *buf, int count, MPI_Datatype datatype, int dest,
	      int tag, MPI_Comm comm, MPI_Request *request);
int MPI_Irecv(void *buf, int count, MPI_Datatype datatype, int source,
	      int tag, MPI_Comm comm, MPI_Request *request);
int MPI_Wait(MPI_Request *request, MPI_Status *status);
int MPI_Waitall(int count, MPI_Request requests[], MPI_Status statuses[]);

#ifdef __cplusplus
}
#endif

#endif /* UKL_MPI_H */
