"""What notebooks call to check a learner's answer: quiz digests, the Horovod script run, the MirroredStrategy loop
comparison, the `#SBATCH` reader, a profiler trace's waits (notebook 06 refuses an answer that calls it). Never a
reference implementation a learner could call instead of the exercise."""
