"""The judge: a process apart from the student's code that holds what grading for credit keeps secret (the course's
seed, the expected values, the tolerances and the bars), draws the cases, and makes the verdicts. The student's
process only calls the function on the inputs it is handed and sends back what came out (see
docs/hostile-submissions.md, "The judge")."""
