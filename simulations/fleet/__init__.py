"""The fleet-scale model: how many write and read nodes Mafka3 and Mafka4 need for a fleet
workload, and the produce tail latency each then has (DESIGN.md section 9).

``workload`` draws the fleet (seeded), ``params`` holds the runtime costs (measured by
``calibrate``, whose raw figures ``fit`` turns into parameters and measurement errors, with
``proc_cpu`` reading CPU time and ``welch`` testing noise), ``capacity`` sizes both designs
(pure), ``placement`` places replicas rack-aware with flow algorithms, ``sweep`` runs the
model over fleet sizes and writes event logs, ``sensitivity`` moves one calibrated parameter at
a time, ``cli`` exposes ``fleet model``, ``fleet calibrate`` and ``fleet sensitivity``.
"""
