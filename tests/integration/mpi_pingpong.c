/* MPI ranks in pairs (0-1, 2-3, ...) send messages of every power of two from 8 B to 4 MiB back and
 * forth; the odd rank of a pair adds one to every byte, the even rank checks each reply. Run by
 * mpi.sh over uroce through Open MPI's pml ucx. Each rank prints what it checked; exit status 0
 * when every byte came back right on every rank. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

enum { kMinBytes = 8, kMaxBytes = 4 << 20, kRounds = 3 };

int main(int argc, char** argv) {
  int rank = 0, size = 0;
  long bad = 0, messages = 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 2 || size % 2 != 0) {
    if (rank == 0) fprintf(stderr, "mpi_pingpong: needs an even number of ranks, has %d\n", size);
    MPI_Finalize();
    return 2;
  }
  unsigned char* buf = malloc(kMaxBytes);
  if (!buf) MPI_Abort(MPI_COMM_WORLD, 3);
  const int peer = rank ^ 1;
  for (int bytes = kMinBytes; bytes <= kMaxBytes; bytes *= 2) {
    for (int round = 0; round < kRounds; ++round) {
      const int tag = bytes + round;
      const unsigned char seed = (unsigned char)(rank * 31 + bytes / 8 + round);
      if (rank % 2 == 0) {
        for (int i = 0; i < bytes; ++i) buf[i] = (unsigned char)(seed + i * 7);
        MPI_Send(buf, bytes, MPI_BYTE, peer, tag, MPI_COMM_WORLD);
        MPI_Recv(buf, bytes, MPI_BYTE, peer, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (int i = 0; i < bytes; ++i) bad += buf[i] != (unsigned char)(seed + i * 7 + 1);
      } else {
        MPI_Recv(buf, bytes, MPI_BYTE, peer, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (int i = 0; i < bytes; ++i) buf[i] += 1;
        MPI_Send(buf, bytes, MPI_BYTE, peer, tag, MPI_COMM_WORLD);
      }
      ++messages;
    }
  }
  long all_bad = 0;
  MPI_Allreduce(&bad, &all_bad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  printf("mpi_pingpong: rank %d of %d (peer %d): %ld round trips of %d B to %d B, %ld wrong\n",
         rank, size, peer, messages, kMinBytes, kMaxBytes, bad);
  free(buf);
  MPI_Finalize();
  return all_bad != 0;
}
