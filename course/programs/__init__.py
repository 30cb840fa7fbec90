"""What runs as a job or under `horovodrun`/`mpiexec`: the Horovod MNIST training and the MirroredStrategy ResNet
(`python -m course.programs.horovod_mnist`, `python -m course.programs.mirrored_resnet`)."""
