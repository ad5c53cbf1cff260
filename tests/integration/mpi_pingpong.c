/* Two MPI ranks send 256 KiB back and forth; rank 1 adds one to every word, rank 0 checks each
 * reply. Run by mpi.sh over uroce through Open MPI's pml ucx. Exit status: 0 when every word came
 * back right. */
#include <mpi.h>
#include <stdio.h>

enum { kWords = 65536, kRounds = 100 };

int main(int argc, char** argv) {
  static int buf[kWords];
  int rank = 0, size = 0;
  long bad = 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2) {
    if (rank == 0) fprintf(stderr, "mpi_pingpong: needs 2 ranks, has %d\n", size);
    MPI_Finalize();
    return 2;
  }
  for (int round = 0; round < kRounds; ++round) {
    if (rank == 0) {
      for (int i = 0; i < kWords; ++i) buf[i] = i ^ round;
      MPI_Send(buf, kWords, MPI_INT, 1, round, MPI_COMM_WORLD);
      MPI_Recv(buf, kWords, MPI_INT, 1, round, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      for (int i = 0; i < kWords; ++i) bad += buf[i] != (i ^ round) + 1;
    } else {
      MPI_Recv(buf, kWords, MPI_INT, 0, round, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      for (int i = 0; i < kWords; ++i) buf[i] += 1;
      MPI_Send(buf, kWords, MPI_INT, 0, round, MPI_COMM_WORLD);
    }
  }
  printf("mpi_pingpong: rank %d: %d rounds of %d words, %ld wrong\n", rank, kRounds, kWords, bad);
  MPI_Finalize();
  return bad != 0;
}
